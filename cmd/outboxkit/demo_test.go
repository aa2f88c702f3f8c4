package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

var verdictOK = regexp.MustCompile(`^verdict: ok written=(\d+) published=(\d+) delivered=(\d+) duplicates_absorbed=(\d+) lost=0 order_violations=0$`)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func runDemoForTest(t *testing.T, cfg demoConfig) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	ok, err := demo(ctx, cfg, &out, &errb)
	require.NoError(t, err, "stderr: %s", errb.String())
	return ok, out.String()
}

func testConfig() demoConfig {
	return demoConfig{duration: 2 * time.Second, producers: 3, workers: 3, accounts: 20, lanes: 8, batch: 100,
		seed: 42, drainTimeout: 40 * time.Second}
}

func TestDemoVerdictOK(t *testing.T) {
	t.Parallel()
	ok, out := runDemoForTest(t, testConfig())
	require.True(t, ok, out)
	m := verdictOK.FindStringSubmatch(lastLine(out))
	require.NotNil(t, m, "last line: %s", lastLine(out))
	require.Equal(t, m[1], m[2], "every written event published")
	require.Equal(t, m[1], m[3], "every written event delivered")
	require.NotEqual(t, "0", m[1])
	// Without --chaos the workers keep the library's default lease: none is lost, so nothing
	// is resent; the output says what its figures mean.
	require.Contains(t, out, " lease="+core.DefaultLeaseTTL.String()+"\n")
	require.Contains(t, out, "\nlegend: written=committed, ")
	require.Regexp(t, `phase=done .* kills=0 claim_lost=0\n`, out)
	require.Equal(t, "0", m[4], "no duplicates without chaos")
}

// demo --help is cobra's, as every other command's; a bad flag is one line and exit 2.
func TestDemoHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"demo", "--help"}, &out, &errb))
	help := out.String()
	require.Contains(t, help, "Usage:\n  outboxkit demo [--chaos] [flags]")
	require.Contains(t, help, "      --chaos ")
	require.Contains(t, help, "-v, --verbose")
	require.Contains(t, help, "claim_lost (batches a worker could not mark published")
	require.NotContains(t, help, "Usage of demo")
	errb.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"demo", "--lanes", "0"}, &out, &errb))
	require.Equal(t, "outboxkit demo: --lanes must be between 1 and 4096\n", errb.String())
}

func TestDemoChaosVerdictOK(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.chaos = true
	ok, out := runDemoForTest(t, cfg)
	require.True(t, ok, out)
	m := verdictOK.FindStringSubmatch(lastLine(out))
	require.NotNil(t, m, "last line: %s", lastLine(out))
	require.Equal(t, m[1], m[3])
	require.NotEqual(t, "0", m[4], "chaos must produce duplicates that the inbox absorbs")
	require.Contains(t, out, "kills=")
	require.NotContains(t, out, "kills=0 claim_lost=0\nverdict", "chaos must kill workers")
}

// The verdict is a safety check: a broker that acknowledges messages it dropped must make the
// demo fail with lost > 0.
func TestDemoVerdictCatchesLoss(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.drainTimeout = 3 * time.Second
	var n atomic.Int64
	cfg.wrapSink = func(s core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			out := make([]error, len(msgs)) // a dropped message keeps its nil: acknowledged
			var keep []core.Message
			var idx []int
			for i, m := range msgs {
				if n.Add(1)%50 == 0 {
					continue // drop every 50th message
				}
				keep, idx = append(keep, m), append(idx, i)
			}
			for j, err := range s.Send(ctx, keep) {
				out[idx[j]] = err
			}
			return out
		})
	}
	ok, out := runDemoForTest(t, cfg)
	require.False(t, ok, out)
	line := lastLine(out)
	require.True(t, strings.HasPrefix(line, "verdict: FAIL "), line)
	require.NotContains(t, line, " lost=0 ", line)
}

func TestRunUsage(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.Equal(t, 2, run(context.Background(), nil, &out, &errb))
	require.Contains(t, errb.String(), "Usage:")
	require.Equal(t, 2, run(context.Background(), []string{"nope"}, &out, &errb))
	require.Equal(t, 2, run(context.Background(), []string{"demo", "--duration", "0s"}, &out, &errb))
	require.Equal(t, 2, run(context.Background(), []string{"stats"}, &out, &errb))
}

// A bad relay configuration prints one line per bad key and exits 2 before starting anything.
func TestRelayBadConfigExits2(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, []byte("database:\n  driver: sqlite\n  dsn: "+filepath.Join(t.TempDir(), "x.db")+"\nrelay:\n  workerz: 2\nroutes: {default: q}\n"), 0o600))
	var out, errb bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"relay", "--config", path, "--relay-batch-size", "-3"}, &out, &errb))
	require.Equal(t, "relay.batch_size: must be between 0 (default) and 100000\nrelay.workerz: unknown key (line 5)\n", errb.String())

	// A bad listen address is refused with the other keys, before the database is opened
	// (the SQLite file is not created), not at listen time after the migration.
	db := filepath.Join(t.TempDir(), "listen.db")
	errb.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"relay", "--database-driver", "sqlite", "--database-dsn", db,
		"--routes-default", "q", "--http-listen", "1"}, &out, &errb))
	require.Equal(t, "http.listen: not a host:port address: \"1\"\n", errb.String())
	require.NoFileExists(t, db)

	// What the relay, the adapter or the listener would refuse at start is refused up front
	// too: exit 2, one line naming the key, and the database untouched (no SQLite file).
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"--relay-batch-size", "100001"}, "relay.batch_size: must be between 0 (default) and 100000"},
		{[]string{"--relay-lease-ttl", "1ns"}, "relay.lease_ttl: too short: the relay renews its leases every lease_ttl/3, and RenewInterval must be positive and shorter than LeaseTTL"},
		{[]string{"--database-lanes", "5000"}, "database.lanes: must be between 1 and 4096"},
		{[]string{"--database-table", "bad-name"}, `database.table: identifier "bad-name" must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$`},
		{[]string{"--relay-retry-jitter", "NaN"}, "relay.retry.jitter: must be a number, got NaN"},
		{[]string{"--http-listen", "999.999.999.999:9464"}, `http.listen: bad host "999.999.999.999" in "999.999.999.999:9464": not an IP address or a DNS name`},
		{[]string{"--aws-endpoint", "localhost:4566"}, `aws.endpoint: must be an absolute http or https URL with a host, got "localhost:4566"`},
	} {
		errb.Reset()
		args := append([]string{"relay", "--migrate", "--database-driver", "sqlite", "--database-dsn", db, "--routes-default", "q"}, c.args...)
		require.Equal(t, 2, run(context.Background(), args, &out, &errb), "%q: %s", c.args, errb.String())
		require.Equal(t, c.line+"\n", errb.String(), c.args)
		require.NoFileExists(t, db)
	}
	for _, dsn := range []string{"postgres://u:p@127.0.0.1:notaport/db", "host=127.0.0.1 port=x"} {
		errb.Reset()
		require.Equal(t, 2, run(context.Background(), []string{"relay", "--database-driver", "postgres", "--database-dsn", dsn, "--routes-default", "q"}, &out, &errb))
		require.True(t, strings.HasPrefix(errb.String(), "database.dsn: cannot parse "), errb.String())
	}
	errb.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"relay", "--database-driver", "mysql", "--database-dsn", "garbage@@", "--routes-default", "q"}, &out, &errb))
	require.Equal(t, "database.dsn: invalid DSN: missing the slash separating the database name\n", errb.String())

	errb.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"relay", "--help"}, &out, &errb))
	require.Contains(t, out.String(), "--shutdown-timeout")
	require.NotContains(t, out.String(), "--chaos", "relay --help lists only the relay's flags")
}

// An address that passes the checks but cannot be bound (a port in use) fails before the
// database is touched: exit 1, the SQLite file not created, nothing migrated.
func TestRelayListenFailsBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	db := filepath.Join(t.TempDir(), "x.db")
	var out, errb bytes.Buffer
	require.Equal(t, 1, run(context.Background(), []string{"relay", "--migrate", "--database-driver", "sqlite", "--database-dsn", db,
		"--routes-default", "q", "--http-listen", busy.Addr().String()}, &out, &errb))
	require.Contains(t, errb.String(), "http.listen: listen tcp "+busy.Addr().String())
	require.NoFileExists(t, db)
}
