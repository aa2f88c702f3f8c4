package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/daemon"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/testkit"
)

// `outboxkit backfill --config relay.yaml`: the CDC relay of the relay daemon's configuration
// runs Backfill once, through the built binary, on PostgreSQL and MariaDB.

// backfillRun runs the binary with the daemon's environment (no OUTBOXKIT_ variable of the
// test servers) and returns its exit status, stdout and stderr.
func backfillRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(daemonBinary(t), args...)
	cmd.Env = append(daemonEnv(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION="+e2eRegion, "AWS_EC2_METADATA_DISABLED=true")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, isExit := err.(*exec.ExitError); isExit {
		return ee.ExitCode(), out.String(), errb.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errb.String()
}

// backfillConfig writes relay.yaml for b in mode with the sink keys sink (a small batch size,
// so that the backfill takes several fetches).
func backfillConfig(t *testing.T, b e2eBackend, mode, sink string) string {
	schema := ""
	if b.schema != "" {
		schema = "  schema: " + b.schema + "\n"
	}
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, `database:
  driver: %s
  dsn: %q
%smode: %s
relay:
  batch_size: 7
  lease_ttl: 3s
%sshutdown_timeout: 2s
`, b.driver, b.dsn, schema, mode, sink), 0o600))
	return path
}

// kafkaTopic creates a topic of the test cluster and returns the sink keys of relay.yaml that
// route every event to it, and a reader of what arrived: each key's event IDs in the order
// they arrived, once want records did (and a quiet second showed no more).
func kafkaTopic(t *testing.T) (string, func(t *testing.T, want int) map[string][]string) {
	brokers := strings.Split(testkit.Need(t, testkit.KafkaBrokers), ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer admin.Close()
	topic := "backfill-" + randSuffix()
	res, err := kadm.NewClient(admin).CreateTopic(t.Context(), 4, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, res.Err)
	config := fmt.Sprintf("sink: kafka\nsinks:\n  kafka:\n    brokers: [%s]\n    client_id: backfill-test\nroutes:\n  default: %s\n",
		strings.Join(brokers, ", "), topic)
	return config, func(t *testing.T, want int) map[string][]string {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(t, err)
		defer cl.Close()
		got := map[string][]string{}
		n := 0
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			wait := 5 * time.Second
			if n >= want {
				wait = time.Second
			}
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			fs := cl.PollFetches(ctx)
			cancel()
			recs := fs.Records()
			if len(recs) == 0 && n >= want {
				break
			}
			for _, r := range recs { // a key stays in one partition: its records in offset order
				for _, h := range r.Headers {
					if h.Key == "ce_id" {
						got[string(r.Key)] = append(got[string(r.Key)], string(h.Value))
						n++
					}
				}
			}
		}
		return got
	}
}

// lostPosition leaves b's outbox as a CDC relay that lost its position leaves it: a CDC
// publisher generation and a checkpoint whose position the log no longer holds (on PostgreSQL
// its slot does not exist; on MariaDB the binary log file was never there).
func lostPosition(t *testing.T, db *opendb.DB) driver.Checkpoint {
	ctx := t.Context()
	src, err := db.ChangeSource()
	require.NoError(t, err)
	id, err := src.Identity(ctx)
	require.NoError(t, err)
	cp := driver.Checkpoint{Source: id, Position: "0/1000028"}
	if strings.HasPrefix(id, "mysql") {
		cp.Position = "file:mysql-bin.000001:4"
	}
	pub, err := db.Store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "lost-relay"})
	require.NoError(t, err)
	cp.Generation = pub.Generation
	require.NoError(t, db.Store.(driver.CheckpointStore).SaveCheckpoint(ctx, cp))
	return cp
}

func backfillStore(t *testing.T, b e2eBackend) *opendb.DB {
	db, err := opendb.Open(t.Context(), opendb.Config{Driver: b.driver, DSN: b.dsn, Schema: b.schema})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// runBackfillE2E: events published before the position was lost are not sent again; a polling
// configuration and a held lane are refused with one line, exit 1 and nothing changed; the
// backfill publishes every unpublished event once, in order per key, checkpoints anew, writes
// its audit row and prints what it did; a second backfill finds nothing to publish.
func runBackfillE2E(t *testing.T, b e2eBackend) {
	ctx := t.Context()
	db := backfillStore(t, b)
	for k := range 3 {
		_, err := b.write(ctx, fmt.Sprintf("k%d", k))
		require.NoError(t, err)
	}
	settle(t, db.Store) // published before the position was lost
	lost := lostPosition(t, db)
	want := map[string][]string{}
	total := 0
	for i := range 12 { // 24 events over 4 keys, 2 per transaction
		key := fmt.Sprintf("k%d", i%4)
		ids, err := b.write(ctx, key)
		require.NoError(t, err)
		want[key] = append(want[key], ids...)
		total += len(ids)
	}
	gen, err := db.Store.Generation(ctx)
	require.NoError(t, err)
	sink, receive := kafkaTopic(t)
	config := backfillConfig(t, b, "cdc", sink)

	unchanged := func(why string) {
		t.Helper()
		cp, ok, err := db.Store.(driver.CheckpointStore).LoadCheckpoint(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, lost.Position, cp.Position, why)
		g, err := db.Store.Generation(ctx)
		require.NoError(t, err)
		require.Equal(t, gen.Generation, g.Generation, why)
		st, err := db.Store.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(total), st.Pending, why)
		audit, err := operatorOf(t, db.Store).AuditLog(ctx, driver.AuditListParams{})
		require.NoError(t, err)
		require.Empty(t, audit, why)
	}

	// A polling configuration: one line naming the problem, exit 1, nothing changed.
	code, out, errs := backfillRun(t, "backfill", "--config", backfillConfig(t, b, "polling", sink))
	require.Equal(t, 1, code, "stdout %q stderr %q", out, errs)
	require.Empty(t, out)
	require.Equal(t, "outboxkit backfill: "+daemon.ErrNotCDC.Error()+": mode is polling\n", errs)
	unchanged("a polling configuration is refused")

	// A relay holds a lane: refused, nothing changed (stop the CDC relay first).
	leases, err := db.Store.ClaimLanes(ctx, driver.ClaimParams{Generation: gen.Generation, Owner: "lost-relay", Max: 1, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	code, out, errs = backfillRun(t, "backfill", "--config", config)
	require.Equal(t, 1, code, "stdout %q stderr %q", out, errs)
	require.Equal(t, 1, strings.Count(errs, "\n"), errs)
	require.Contains(t, errs, ErrLanesHeld.Error())
	unchanged("refused while a lane is held")
	require.NoError(t, db.Store.ReleaseLanes(ctx, leases))

	began := time.Now()
	code, out, errs = backfillRun(t, "backfill", "--config", config, "--actor", "ops", "--output", "json")
	require.Equal(t, 0, code, "stdout %q stderr %q", out, errs)
	t.Logf("%s: backfill of %d events in %v", b.driver, total, time.Since(began).Round(time.Millisecond))
	require.Empty(t, errs, "nothing on stderr")
	var res backfillJSON
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, uint64(total), res.Published)
	require.Greater(t, res.Generation, gen.Generation, "the backfill took the outbox over")
	require.NotEmpty(t, res.Checkpoint)
	require.NotEqual(t, lost.Position, res.Checkpoint)

	require.Equal(t, want, receive(t, total), "every unpublished event once, in order per key; none published before")
	cp, found, err := db.Store.(driver.CheckpointStore).LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, res.Checkpoint, cp.Position)
	require.Equal(t, res.Generation, cp.Generation)
	st, err := db.Store.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)

	audit, err := operatorOf(t, db.Store).AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "ops", audit[0].Actor)
	require.Equal(t, "backfill", audit[0].Command)
	require.Equal(t, int64(total), audit[0].Rows)
	require.JSONEq(t, fmt.Sprintf(`{"config":%q,"finished":true}`, config), audit[0].Arguments)

	// Nothing left: the second backfill publishes nothing, checkpoints again, writes its row.
	code, out, errs = backfillRun(t, "backfill", "--config", config)
	require.Equal(t, 0, code, "stdout %q stderr %q", out, errs)
	require.Regexp(t, `^backfilled published=0 checkpoint=\S+ generation=\d+\n$`, out)
	audit, err = operatorOf(t, db.Store).AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, audit, 2)
	require.Equal(t, "backfill", audit[1].Command)
	require.Zero(t, audit[1].Rows)
}

func TestBackfillPostgres(t *testing.T) {
	t.Parallel()
	runBackfillE2E(t, postgresBackend(t, "cdc"))
}

func TestBackfillMariaDB(t *testing.T) {
	t.Parallel()
	runBackfillE2E(t, mysqlBackend(t, "cdc"))
}

// SIGTERM stops a backfill whose send hangs (a sink endpoint that never answers): after
// shutdown_timeout it stops hard and exits 1 with one line naming the cancellation; the
// checkpoint has not moved, the events are still unpublished, and the audit row says the
// backfill did not finish.
func TestBackfillSignal(t *testing.T) {
	t.Parallel()
	b := postgresBackend(t, "cdc")
	ctx := t.Context()
	db := backfillStore(t, b)
	lost := lostPosition(t, db)
	for k := range 3 {
		_, err := b.write(ctx, fmt.Sprintf("k%d", k))
		require.NoError(t, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	sending := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			select { // the sink's request is in flight: it is never answered
			case sending <- struct{}{}:
			default:
			}
		}
	}()
	config := backfillConfig(t, b, "cdc", fmt.Sprintf("sink: sqs\naws:\n  endpoint: http://%s\nroutes:\n  default: http://%s/queue/q\n", ln.Addr(), ln.Addr()))

	cmd := exec.Command(daemonBinary(t), "backfill", "--config", config)
	cmd.Env = append(daemonEnv(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION="+e2eRegion, "AWS_EC2_METADATA_DISABLED=true")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-sending:
	case err := <-done:
		t.Fatalf("exited before its send: %v\nstdout %q stderr %q", err, out.String(), errb.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no send within 30s")
	}
	termExits1(t, cmd, done, func() string { return fmt.Sprintf("stdout %q stderr %q", out.String(), errb.String()) })
	// One line of the command's, after the relay's warnings (JSON log records: its send
	// cancelled by the hard stop).
	require.Empty(t, out.String())
	lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
	for _, l := range lines[:len(lines)-1] {
		require.True(t, json.Valid([]byte(l)), "a log record: %q", l)
	}
	require.Equal(t, "outboxkit backfill: outbox: cdc relay: backfill stopped before it finished: context canceled", lines[len(lines)-1])

	cp, ok, err := db.Store.(driver.CheckpointStore).LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, lost.Position, cp.Position, "the checkpoint has not moved")
	st, err := db.Store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(6), st.Pending)
	audit, err := operatorOf(t, db.Store).AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "backfill", audit[0].Command)
	require.Zero(t, audit[0].Rows)
	require.JSONEq(t, fmt.Sprintf(`{"config":%q,"finished":false}`, config), audit[0].Arguments)
}

// SIGTERM mid-backfill (the SQS emulator answers): the backfill stops after the batch in flight
// and exits 1 with one line; what it published stays published and is its audit row's Rows;
// the checkpoint has not moved, and the next backfill publishes the rest.
func TestBackfillSignalGraceful(t *testing.T) {
	t.Parallel()
	b := postgresBackend(t, "cdc")
	ctx := t.Context()
	db := backfillStore(t, b)
	lost := lostPosition(t, db)
	const total = 600
	store := db.Store.(*postgres.Store[pgx.Tx])
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(t, err)
	write := testkit.Writer(store, ob, 100, []byte(`{}`))
	for i := range total / 100 {
		_, err := write(ctx, fmt.Sprintf("k%d", i%3))
		require.NoError(t, err)
	}
	began := time.Now()
	config := backfillConfig(t, b, "cdc", sqsE2ESink(t).config)
	stats := func() driver.Stats {
		st, err := db.Store.Stats(ctx)
		require.NoError(t, err)
		return st
	}

	cmd := exec.Command(daemonBinary(t), "backfill", "--config", config)
	cmd.Env = append(daemonEnv(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION="+e2eRegion, "AWS_EC2_METADATA_DISABLED=true")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	require.Eventually(t, func() bool { return stats().Pending < total }, 30*time.Second, 5*time.Millisecond, "the backfill publishes")
	termExits1(t, cmd, done, func() string { return fmt.Sprintf("stdout %q stderr %q", out.String(), errb.String()) })
	require.Empty(t, out.String())
	published := total - stats().Pending
	require.Positive(t, published)
	require.Less(t, published, int64(total), "stopped before the end")
	require.Equal(t, fmt.Sprintf("outboxkit backfill: outbox: cdc relay: backfill stopped by Shutdown before it finished: context canceled "+
		"(published=%d before it stopped; the checkpoint has not moved: run backfill again)\n", published), errb.String())
	cp, _, err := db.Store.(driver.CheckpointStore).LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, lost.Position, cp.Position, "the checkpoint has not moved")
	audit, err := operatorOf(t, db.Store).AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, published, audit[0].Rows)
	require.JSONEq(t, fmt.Sprintf(`{"config":%q,"finished":false}`, config), audit[0].Arguments)

	t.Logf("stopped after %d of %d events; %v", published, total, time.Since(began).Round(time.Millisecond))
	code, text, errs := backfillRun(t, "backfill", "--config", config)
	require.Equal(t, 0, code, errs)
	t.Logf("the rest in %v", time.Since(began).Round(time.Millisecond))
	require.Contains(t, text, fmt.Sprintf("backfilled published=%d ", total-published))
	require.Zero(t, stats().Pending)
}

// A role that may not write the audit row (here: read-only) is refused before the backfill
// takes the outbox over: one line naming the missing privileges, exit 1, nothing changed.
func TestBackfillPrivileges(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		b := postgresBackend(t, "cdc")
		admin, err := pgx.Connect(t.Context(), b.dsn)
		require.NoError(t, err)
		defer admin.Close(context.Background())
		role := "okt_" + randSuffix()
		_, err = admin.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN PASSWORD 'pw'; GRANT USAGE ON SCHEMA "+b.schema+" TO "+role+
			"; GRANT SELECT ON ALL TABLES IN SCHEMA "+b.schema+" TO "+role)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role)
			_, _ = admin.Exec(context.Background(), "DROP ROLE "+role)
		})
		u, err := url.Parse(b.dsn)
		require.NoError(t, err)
		u.User = url.UserPassword(role, "pw")
		backfillRefused(t, b, u.String())
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		b := mysqlBackend(t, "cdc")
		cfg, err := gomysql.ParseDSN(b.dsn)
		require.NoError(t, err)
		admin, err := sql.Open("mysql", b.dsn)
		require.NoError(t, err)
		defer admin.Close()
		user := "okt_" + randSuffix()
		_, err = admin.ExecContext(t.Context(), "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.Exec("DROP USER '" + user + "'@'%'") })
		_, err = admin.ExecContext(t.Context(), "GRANT SELECT ON `"+cfg.DBName+"`.* TO '"+user+"'@'%'")
		require.NoError(t, err)
		cfg.User, cfg.Passwd = user, "pw"
		backfillRefused(t, b, cfg.FormatDSN())
	})
}

// backfillRefused runs the backfill of b's lost outbox as the read-only role of dsn.
func backfillRefused(t *testing.T, b e2eBackend, dsn string) {
	ctx := t.Context()
	db := backfillStore(t, b)
	lost := lostPosition(t, db)
	_, err := b.write(ctx, "k")
	require.NoError(t, err)
	gen, err := db.Store.Generation(ctx)
	require.NoError(t, err)
	ro := b
	ro.dsn = dsn
	sink, _ := kafkaTopic(t)

	code, out, errs := backfillRun(t, "backfill", "--config", backfillConfig(t, ro, "cdc", sink))
	require.Equal(t, 1, code, "stdout %q stderr %q", out, errs)
	require.Equal(t, 1, strings.Count(errs, "\n"), errs)
	require.Contains(t, errs, ErrPrivileges.Error())
	require.Contains(t, errs, "check audit")
	g, err := db.Store.Generation(ctx)
	require.NoError(t, err)
	require.Equal(t, gen.Generation, g.Generation, "the outbox was not taken over")
	cp, _, err := db.Store.(driver.CheckpointStore).LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, lost.Position, cp.Position)
	st, err := db.Store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Pending)
	audit, err := operatorOf(t, db.Store).AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Empty(t, audit)
}

// Bad usage and a bad configuration: one line each, exit 2, before any database is opened.
func TestBackfillUsage(t *testing.T) {
	t.Parallel()
	fails(t, 2, "--output: want text or json", "backfill", "--output", "yaml")
	fails(t, 2, "no such file or directory", "backfill", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	fails(t, 2, "unknown flag: --db", "backfill", "--db", "sqlite:x.db")
	config := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(config, []byte("database:\n  driver: sqlite\n  dsn: x.db\nmode: cdc\nroutes:\n  default: q\n"), 0o600))
	fails(t, 2, "mode: cdc needs driver postgres or mysql", "backfill", "--config", config)
	// What the CDC relay or the adapter would refuse once the database was opened: refused first.
	require.NoError(t, os.WriteFile(config, []byte("database:\n  driver: postgres\n  dsn: postgres://u:p@127.0.0.1:notaport/db\nmode: cdc\nroutes:\n  default: q\n"), 0o600))
	fails(t, 2, "database.dsn: cannot parse", "backfill", "--config", config)
	require.NoError(t, os.WriteFile(config, []byte("database:\n  driver: postgres\n  dsn: postgres://127.0.0.1:1/db\n  table: x-y\nmode: cdc\nroutes:\n  default: q\n"), 0o600))
	fails(t, 2, "database.table: must match", "backfill", "--config", config)
	fails(t, 2, "relay.batch_size: must be between 0 (default) and 100000", "backfill", "--config", config, "--database-table", "events", "--relay-batch-size", "100001")
	fails(t, 2, "relay.lease_ttl: too short", "backfill", "--config", config, "--database-table", "events", "--relay-lease-ttl", "1ns")
}

// termExits1 sends SIGTERM to cmd, whose Wait result done gives, and requires exit status 1
// within 15 s; what describes the output on failure.
func termExits1(t *testing.T, cmd *exec.Cmd, done <-chan error, what func() string) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, what())
		require.Equal(t, 1, ee.ExitCode())
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no exit within 15s of SIGTERM")
	}
}
