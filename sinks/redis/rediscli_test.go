package redis_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// redisCLI runs Debian's redis-cli (hiredis), a client we did not write, against the test
// server, with --no-raw: every string of the reply is quoted, binary bytes escaped.
func redisCLI(t *testing.T, args ...string) string {
	t.Helper()
	path := testkit.NeedCommand(t, "redis-cli", "source scripts/lib/redis.sh && redis_start installs it")
	host, port, ok := strings.Cut(addr(t), ":")
	require.True(t, ok, "OUTBOXKIT_REDIS_ADDR must be host:port")
	out, err := exec.Command(path, append([]string{"-h", host, "-p", port, "--no-raw"}, args...)...).Output()
	require.NoError(t, err, "redis-cli %v", args)
	return string(out)
}

var cliString = regexp.MustCompile(`^\s*(?:\d+\)\s+)+"(.*)"$`)

// cliStrings returns the strings of a --no-raw reply in order, unescaped (redis-cli quotes
// them with sdscatrepr: \n \r \t \a \b \" \\ and \xHH).
func cliStrings(t *testing.T, out string) []string {
	t.Helper()
	var strs []string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		m := cliString.FindStringSubmatch(line)
		require.NotNil(t, m, "unexpected redis-cli line %q", line)
		q := m[1]
		var b strings.Builder
		for i := 0; i < len(q); i++ {
			if q[i] != '\\' {
				b.WriteByte(q[i])
				continue
			}
			i++
			switch q[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				v, err := strconv.ParseUint(q[i+1:i+3], 16, 8)
				require.NoError(t, err, "bad escape in %q", q)
				b.WriteByte(byte(v))
				i += 2
			default: // \" and \\
				b.WriteByte(q[i])
			}
		}
		strs = append(strs, b.String())
	}
	return strs
}

// TestRedisCLIReadsWhatTheSinkWrote: redis-cli reads every entry back with XRANGE, in send
// order per key, the payload byte for byte (all 256 byte values, quotes, newlines, invalid
// UTF-8) and the CloudEvents fields.
func TestRedisCLIReadsWhatTheSinkWrote(t *testing.T) {
	t.Parallel()
	stream := newStream(t)
	sink, err := redissink.New(newClient(t), nil)
	require.NoError(t, err)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	payloads := [][]byte{all, []byte("a \"quoted\"\n\\line\r\n"), {0xff, 0xfe, 0x00}, {}, []byte(`{"n":1}`)}
	var msgs []core.Message
	for i := range 6 {
		for _, k := range []string{"x", "y"} {
			m := message(stream, k, i)
			m.Payload = payloads[(i+len(k))%len(payloads)]
			m.Headers["note"] = fmt.Sprintf("héllo %d\t", i)
			msgs = append(msgs, m)
		}
	}
	for _, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
	ids := cliStrings(t, redisCLI(t, "XRANGE", stream, "-", "+"))
	// XRANGE's reply flattened: each entry's ID, then its field-value pairs. Split on the IDs
	// with the help of XLEN-many entries of 2k+1 strings each.
	var entries []map[string]string
	for i := 0; i < len(ids); {
		id := ids[i]
		require.Regexp(t, `^\d+-\d+$`, id)
		e := map[string]string{}
		i++
		for i+1 < len(ids) && !regexp.MustCompile(`^\d+-\d+$`).MatchString(ids[i]) {
			e[ids[i]] = ids[i+1]
			i += 2
		}
		entries = append(entries, e)
	}
	require.Len(t, entries, len(msgs))
	next := map[string]int{}
	byID := map[string]*core.Message{}
	for i := range msgs {
		byID[msgs[i].ID] = &msgs[i]
	}
	for _, e := range entries {
		m := byID[e[redissink.FieldID]]
		require.NotNil(t, m, "entry %v", e)
		key := e["ce_partitionkey"]
		require.Equal(t, m.GroupID, key)
		want := message(stream, strings.TrimPrefix(key, "order/"), next[key])
		require.Equal(t, want.ID, m.ID, "key %s out of order", key)
		next[key]++
		require.Equal(t, string(m.Payload), e[redissink.FieldPayload], "payload of %s", m.ID)
		require.Equal(t, m.Headers["note"], e[redissink.FieldHeaderPrefix+"note"])
		require.Equal(t, "1.0", e[redissink.FieldSpecVersion])
		require.Equal(t, strconv.FormatInt(m.AggregateVersion, 10), e["ce_aggregateversion"])
		require.Equal(t, m.Headers["traceparent"], e["ce_traceparent"])
	}
	require.Equal(t, map[string]int{"order/x": 6, "order/y": 6}, next)
}
