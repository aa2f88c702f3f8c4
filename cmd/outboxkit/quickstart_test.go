package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/sinks/stdout"
)

// The README's "The relay as a process" path: the quick start writes its events and stops
// (-produce-only), then `outboxkit relay --config examples/quickstart/relay.yaml` publishes
// them to standard output, one CloudEvents line each, in order per account.
func TestQuickstartThroughTheDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "app.db")
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs the example as the README does")
	cmd := exec.CommandContext(t.Context(), gobin, "run", "./examples/quickstart", "-produce-only", "-db", dbPath)
	cmd.Dir = "../.."
	outb, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", outb)
	require.Contains(t, string(outb), "events left for the relay in")

	config, err := os.ReadFile("../../examples/quickstart/relay.yaml")
	require.NoError(t, err)
	cfg := strings.Replace(string(config), "dsn: sqlite:app.db", "dsn: sqlite:"+dbPath, 1)
	cfg = strings.Replace(cfg, "listen: 127.0.0.1:9464", `listen: "127.0.0.1:0"`, 1)
	require.NotEqual(t, string(config), cfg)
	out, errb, stop := startRelay(t, cfg)
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") >= 3 }, 2*time.Minute, 20*time.Millisecond, "stderr: %s", errb.String())
	require.Equal(t, 0, stop(), errb.String())

	var accounts []string
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		l, err := stdout.DecodeLine(sc.Bytes())
		require.NoError(t, err, "every stdout line is a message: %q", sc.Text())
		require.Equal(t, "account.credited", l.Type)
		require.Equal(t, "ledger-queue", l.Destination)
		accounts = append(accounts, l.Subject+" "+string(l.Data))
	}
	require.Len(t, accounts, 3, out.String())
	var alice []string
	for _, a := range accounts {
		if strings.HasPrefix(a, "account/alice ") {
			alice = append(alice, a)
		}
	}
	require.Equal(t, []string{`account/alice {"account":"alice","amount":10}`, `account/alice {"account":"alice","amount":7}`}, alice, "one key, in write order")
	require.Contains(t, errb.String(), "published=3")
}
