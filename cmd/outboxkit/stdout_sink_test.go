package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/stdout"
)

// startRelay runs `outboxkit relay --config` on config in the background; stop cancels it and
// returns its exit status.
func startRelay(t *testing.T, config string) (stdoutBuf, stderrBuf *lockedBuffer, stop func() int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	ctx, cancel := context.WithCancel(t.Context())
	stdoutBuf, stderrBuf = &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"relay", "--config", path}, stdoutBuf, stderrBuf) }()
	return stdoutBuf, stderrBuf, func() int { cancel(); return <-done }
}

// `sink: stdout`: the relay on a SQLite outbox prints one CloudEvents JSON line per event on
// standard output, and nothing else (its logs are on standard error).
func TestRelaySinkStdout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbPath := filepath.Join(t.TempDir(), "app.db")
	out, errb, stop := startRelay(t, fmt.Sprintf(`
database: {dsn: "sqlite:%s"}
migrate: true
sink: stdout
sinks: {stdout: {source: shop}}
routes: {default: events, by_destination: {billing: invoices}}
relay: {poll_interval: 10ms}
http: {listen: "127.0.0.1:0"}
`, dbPath))
	// Once migrated (by the relay), write events as an application does.
	require.Eventually(t, func() bool { return strings.Contains(errb.String(), `"msg":"daemon_started"`) }, time.Minute, 10*time.Millisecond, errb.String())
	db, err := sqlite.OpenDB(ctx, dbPath)
	require.NoError(t, err)
	defer db.Close()
	store, err := sqlite.New(db, nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(t, err)
	events := []core.Event{
		{ID: "e1", AggregateType: "order", AggregateID: "42", AggregateVersion: 1, Type: "order.placed", Payload: []byte(`{"total":1250}`), Headers: map[string]string{"x-region": "eu"}},
		{ID: "e2", AggregateType: "order", AggregateID: "42", AggregateVersion: 2, Type: "order.billed", Destination: "billing", Payload: []byte{0xff, 0x00}},
	}
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, events...)
		return err
	}))
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") >= 2 }, time.Minute, 10*time.Millisecond, "stderr: %s", errb.String())
	require.Equal(t, 0, stop(), errb.String())

	var lines []stdout.Line
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		l, err := stdout.DecodeLine(sc.Bytes())
		require.NoError(t, err, "every stdout line is a message: %q", sc.Text())
		lines = append(lines, l)
	}
	require.Len(t, lines, 2, out.String())
	require.Equal(t, []string{"e1", "e2"}, []string{lines[0].ID, lines[1].ID}, "one key: in write order")
	l := lines[0]
	require.Equal(t, [6]string{"1.0", "shop", "order.placed", "order/42", "events", "order/42"},
		[6]string{l.SpecVersion, l.Source, l.Type, l.Subject, l.Destination, l.PartitionKey})
	require.JSONEq(t, `{"total":1250}`, string(l.Data), "a JSON payload is embedded as data")
	require.Equal(t, "eu", l.Headers["x-region"], "the event headers are in headers")
	require.NotNil(t, l.Time)
	require.Equal(t, "invoices", lines[1].Destination, "routed by destination")
	require.Equal(t, []byte{0xff, 0x00}, lines[1].Payload(), "a binary payload travels as data_base64")
	require.Contains(t, errb.String(), `"msg":"daemon_stopped"`, "the logs are on stderr")
}

// A relay on an unmigrated database logs the error once and exits 1.
func TestRelayNotMigratedLogsOnce(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "empty.db")
	db, err := sqlite.OpenDB(t.Context(), dbPath) // an existing, unmigrated database
	require.NoError(t, err)
	require.NoError(t, db.Close())
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf("database: {dsn: \"sqlite:%s\"}\nsink: stdout\nroutes: {default: q}\nhttp: {listen: \"127.0.0.1:0\"}\n", dbPath)), 0o600))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run(t.Context(), []string{"relay", "--config", path}, &out, &errb), errb.String())
	require.Equal(t, 1, strings.Count(errb.String(), "outbox_meta"), "the error is logged once: %s", errb.String())
	require.Contains(t, errb.String(), `"msg":"daemon_failed"`)
	require.Empty(t, out.String())
}
