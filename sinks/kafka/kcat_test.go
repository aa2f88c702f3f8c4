package kafka_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// kcat runs Debian's kcat (librdkafka), a client we did not write, against the test cluster.
func kcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	path := testkit.NeedCommand(t, "kcat", "source scripts/lib/kafka.sh && kafka_start installs it")
	cmd := exec.Command(path, append([]string{"-b", strings.Join(brokers(t), ",")}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	require.NoError(t, err, "kcat %v", args)
	return string(out)
}

// TestKcatReadsWhatTheSinkProduced: librdkafka reads the zstd-compressed records back with
// their keys, CloudEvents headers, one partition per key and per-key order.
func TestKcatReadsWhatTheSinkProduced(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 4)
	sink, err := kafka.New(newClient(t, kgo.ProducerBatchCompression(kgo.ZstdCompression())), nil)
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 10; i++ {
		for _, k := range []string{"x", "y", "z"} {
			msgs = append(msgs, message(topic, k, i))
		}
	}
	for _, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
	out := kcat(t, "", "-C", "-t", topic, "-o", "beginning", "-c", strconv.Itoa(len(msgs)), "-e", "-q",
		"-f", "%k\t%p\t%o\t%h\t%s\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, len(msgs))
	partOf := map[string]string{}
	next := map[string]int{}
	for _, l := range lines {
		f := strings.SplitN(l, "\t", 5)
		require.Len(t, f, 5, l)
		key, part, headers, value := f[0], f[1], f[3], f[4]
		if p, ok := partOf[key]; ok {
			require.Equal(t, p, part, "key %s in two partitions", key)
		}
		partOf[key] = part
		want := message(topic, strings.TrimPrefix(key, "order/"), next[key])
		next[key]++
		require.Equal(t, string(want.Payload), value)
		require.Contains(t, ","+headers+",", ",ce_id="+want.ID+",", "key %s out of order", key)
		require.Contains(t, headers, "ce_specversion=1.0")
		require.Contains(t, headers, fmt.Sprintf("ce_aggregateversion=%d", want.AggregateVersion))
	}
	require.Len(t, next, 3)
}
