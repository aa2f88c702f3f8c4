package nats_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// natsCLI runs the NATS CLI (github.com/nats-io/natscli, a client we did not write; built by
// nats_start into $OUTBOXKIT_NATS_CLI) against the test server.
func natsCLI(t *testing.T, args ...string) []byte {
	t.Helper()
	name := os.Getenv("OUTBOXKIT_NATS_CLI")
	if name == "" {
		name = "nats"
	}
	path := testkit.NeedCommand(t, name, "source scripts/lib/nats.sh && nats_start builds it")
	cmd := exec.Command(path, append([]string{"--server", testkit.Need(t, testkit.NATSURL)}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no user contexts
	out, err := cmd.Output()
	require.NoError(t, err, "nats %v", args)
	return out
}

// parseHeaders parses a NATS header block ("NATS/1.0\r\n", "Name: value\r\n" lines, "\r\n")
// by hand, independently of nats.go.
func parseHeaders(t *testing.T, block []byte) map[string]string {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(block))
	require.True(t, sc.Scan())
	require.Equal(t, "NATS/1.0", strings.TrimSpace(sc.Text()))
	h := map[string]string{}
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		require.True(t, ok, line)
		h[k] = strings.TrimSpace(v)
	}
	return h
}

// TestCLIReadsWhatTheSinkPublished: the NATS CLI reads the stored messages back with their
// payloads, CloudEvents headers and Nats-Msg-Id, in per-key order.
func TestCLIReadsWhatTheSinkPublished(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	js := newJS(t, nc)
	subject := unique("c") + ".events"
	stream := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}})
	sink, err := natssink.New(nc, &natssink.Options{ContentType: "application/json"})
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 5; i++ {
		for _, k := range []string{"x", "y", "z"} {
			msgs = append(msgs, message(subject, k, i))
		}
	}
	for _, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
	var info struct {
		State struct {
			Msgs uint64 `json:"messages"`
		} `json:"state"`
	}
	require.NoError(t, json.Unmarshal(natsCLI(t, "stream", "info", stream.CachedInfo().Config.Name, "--json"), &info))
	require.EqualValues(t, len(msgs), info.State.Msgs)
	next := map[string]int{}
	for seq := 1; seq <= len(msgs); seq++ {
		var got struct {
			Subject string `json:"subject"`
			Seq     int    `json:"seq"`
			Hdrs    string `json:"hdrs"`
			Data    string `json:"data"`
		}
		require.NoError(t, json.Unmarshal(natsCLI(t, "stream", "get", stream.CachedInfo().Config.Name, strconv.Itoa(seq), "--json"), &got))
		require.Equal(t, subject, got.Subject)
		block, err := base64.StdEncoding.DecodeString(got.Hdrs)
		require.NoError(t, err)
		data, err := base64.StdEncoding.DecodeString(got.Data)
		require.NoError(t, err)
		h := parseHeaders(t, block)
		k := h["ce-aggregateid"]
		want := message(subject, k, next[k])
		next[k]++
		require.Equal(t, string(want.Payload), string(data))
		require.Equal(t, want.ID, h["ce-id"], "key %s out of order", k)
		require.Equal(t, want.ID, h["Nats-Msg-Id"])
		require.Equal(t, "1.0", h["ce-specversion"])
		require.Equal(t, "order.updated", h["ce-type"])
		require.Equal(t, "order/"+k, h["ce-partitionkey"])
		require.Equal(t, fmt.Sprint(want.AggregateVersion), h["ce-aggregateversion"])
		require.Equal(t, "application/json", h["content-type"])
		require.Equal(t, "test", h["outbox-h-origin"])
		require.Equal(t, "2026-12-01T06:00:00.123456Z", h["ce-time"])
	}
	require.Equal(t, map[string]int{"x": 5, "y": 5, "z": 5}, next)
}
