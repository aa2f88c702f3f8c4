package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres/internal/pgtest"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// The tests of this file run through PgBouncer 1.18 (scripts/lib/pgbouncer.sh): in
// pool_mode=transaction, where a client's transactions run on whichever server connection is
// free and PgBouncer keeps no prepared statement (pgx must not use its statement cache: the
// README's "Behind a connection pooler"), and in pool_mode=session.

// pooledPool is a pool through the PgBouncer of the environment variable env, in query
// execution mode mode. PgBouncer refuses the search_path startup parameter, so the stores of
// these tests name their schema (Options.Schema) and the tests qualify their own tables; each
// connection is registered under schema in connSchema (the conformance harness's Effect finds
// its counters table with it).
func pooledPool(tb testing.TB, env string, mode pgx.QueryExecMode, maxConns int32, schema string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(testkit.Need(tb, env))
	require.NoError(tb, err)
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.MaxConns = maxConns
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		connSchema.Store(c, schema)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// connSchema maps each *pgx.Conn of a pooledPool to its schema.
var connSchema sync.Map

func counterBumpIn(schema string) string {
	return `INSERT INTO ` + quote(schema) + `.counters AS c (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = c.n + 1`
}

func counterGetIn(schema string) string {
	return `SELECT coalesce((SELECT n FROM ` + quote(schema) + `.counters WHERE key = $1), 0)`
}

// pooledSchema creates a fresh schema (directly: it is the test's set-up) with the counters
// table of the conformance harness, and drops it at the end.
func pooledSchema(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	schema := randomName("okb_")
	_, err := admin(tb).Exec(ctx, "CREATE SCHEMA "+quote(schema))
	require.NoError(tb, err)
	_, err = admin(tb).Exec(ctx, "CREATE TABLE "+quote(schema)+".counters (key text PRIMARY KEY, n integer NOT NULL)")
	require.NoError(tb, err)
	tb.Cleanup(func() {
		if _, err := admin(tb).Exec(context.Background(), "DROP SCHEMA "+quote(schema)+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// pooledStore is a Store in a fresh schema on a pool through the PgBouncer of env, migrated
// through it.
func pooledStore(tb testing.TB, env string, mode pgx.QueryExecMode, opts Options) (*Store[pgx.Tx], *pgxpool.Pool) {
	tb.Helper()
	opts.Schema = pooledSchema(tb)
	pool := pooledPool(tb, env, mode, 8, opts.Schema)
	s, err := New(pool, &opts)
	require.NoError(tb, err)
	require.NoError(tb, s.Migrate(context.Background()), "Migrate through the pooler")
	return s, pool
}

// noSession hides Wakeups and HoldLiveness: a struct that embeds it next to a *Store has
// neither method (the two embedded fields' methods of one name cancel each other out), so
// the conformance suite runs a store through a transaction pooler without the session
// features it refuses there (TestPoolerSessionFeatures checks the refusals).
//
//lint:ignore U1000 never called: its methods exist only to cancel the Store's
type noSession struct{}

//lint:ignore U1000 cancels Store.Wakeups in pooledAdapter
func (noSession) Wakeups() {}

//lint:ignore U1000 cancels Store.HoldLiveness in pooledAdapter
func (noSession) HoldLiveness() {}

type pooledAdapter[TTx any] struct {
	*Store[TTx]
	noSession //lint:ignore U1000 see noSession
}

// pooledCapabilities are the capabilities of a store through a transaction pooler.
const pooledCapabilities = capabilities &^ (conformance.Waker | conformance.Liveness)

// TestPoolerConformance runs the conformance suite on stores whose every statement goes through
// PgBouncer in transaction mode: producers, polling relays with both claim strategies, the
// inbox (Process, ProcessBatch), cleanup and the operator commands, in the query execution
// modes the README names (pgx's statement cache is not among them).
func TestPoolerConformance(t *testing.T) {
	t.Parallel()
	testkit.Need(t, testkit.PgBouncerTxDSN)
	testDSN(t)
	for _, c := range []struct {
		name     string
		env      string // the PgBouncer
		mode     pgx.QueryExecMode
		strategy ClaimStrategy
		session  bool // pool_mode=session: Options.PoolerKeepsSessions, every capability
	}{
		{"pgx/exec/skip_locked", testkit.PgBouncerTxDSN, pgx.QueryExecModeExec, ClaimSkipLocked, false},
		{"pgx/simple_protocol/advisory_lock", testkit.PgBouncerTxDSN, pgx.QueryExecModeSimpleProtocol, ClaimAdvisoryLock, false},
		// Session mode keeps a client's server connection: pgx's statement cache, LISTEN and
		// the sign of life all work once the store is told (PoolerKeepsSessions).
		{"session/pgx/cache_statement/skip_locked", testkit.PgBouncerSessionDSN, pgx.QueryExecModeCacheStatement, ClaimSkipLocked, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			adapter := func(s *Store[pgx.Tx]) conformance.Adapter[pgx.Tx] {
				if c.session {
					return s
				}
				return &pooledAdapter[pgx.Tx]{Store: s}
			}
			caps := pooledCapabilities
			if c.session {
				caps = capabilities
			}
			conformance.Run(t, conformance.Harness[pgx.Tx]{
				New: func(t *testing.T, lanes int) conformance.Adapter[pgx.Tx] {
					s, _ := pooledStore(t, c.env, c.mode, Options{Lanes: lanes, ClaimStrategy: c.strategy, PoolerKeepsSessions: c.session})
					return adapter(s)
				},
				NewUnmigrated: func(t *testing.T) conformance.Adapter[pgx.Tx] {
					schema := pooledSchema(t)
					s, err := New(pooledPool(t, c.env, c.mode, 4, schema), &Options{Schema: schema, ClaimStrategy: c.strategy, PoolerKeepsSessions: c.session})
					require.NoError(t, err)
					return adapter(s)
				},
				KillSession: func(ctx context.Context, t *testing.T, a conformance.Adapter[pgx.Tx], lane int) error {
					return killLiveSession[pgx.Tx](ctx, t, a.(*Store[pgx.Tx]), lane) // session mode only: Liveness
				},
				Effect: func(ctx context.Context, tx pgx.Tx, key string) error {
					schema, ok := connSchema.Load(tx.Conn())
					if !ok {
						return fmt.Errorf("the transaction's connection is not of a pooledPool")
					}
					_, err := tx.Exec(ctx, counterBumpIn(schema.(string)), key)
					return err
				},
				EffectCount: func(ctx context.Context, a conformance.Adapter[pgx.Tx], key string) (int, error) {
					s, ok := a.(*Store[pgx.Tx])
					if !ok {
						s = a.(*pooledAdapter[pgx.Tx]).Store
					}
					var n int
					err := queryRow(ctx, s.db, counterGetIn(s.o.Schema), []any{key}, &n)
					return n, err
				},
				Diagnose:     func(ctx context.Context) string { return pgtest.ServerState(ctx, admin(t)) },
				Capabilities: caps,
			})
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// pooledDrain has producers write events of keys keys (each key by one producer, in its own
// transactions with a domain row) through the store's Outbox while two relays on store run,
// and checks that every event is delivered and per key in write order.
func pooledDrain[TTx any](t *testing.T, s *Store[TTx], begin func(ctx context.Context, fn func(tx TTx) error) error,
	domain func(ctx context.Context, tx TTx, key string) error, logs *syncBuffer) {
	t.Helper()
	ctx := t.Context()
	const keys, perKey = 8, 25
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	sink := conformance.NewSink()
	logger := slog.New(slog.NewTextHandler(logs, nil))
	var relays sync.WaitGroup
	rctx, stop := context.WithCancel(ctx)
	errs := make(chan error, 2)
	for i := range 2 {
		r, err := core.NewRelay(s, sink, core.StaticRouter{Default: "q"}, &core.RelayOptions{
			Owner: fmt.Sprintf("relay-%d", i), PollInterval: 20 * time.Millisecond, LeaseTTL: 5 * time.Second, Logger: logger})
		require.NoError(t, err)
		relays.Go(func() { errs <- r.Run(rctx) })
	}
	defer func() {
		stop()
		relays.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "relay Run")
		}
	}()

	want := map[string][]string{}
	var all []string
	var mu sync.Mutex
	var producers sync.WaitGroup
	perr := make(chan error, keys)
	for k := range keys {
		producers.Go(func() {
			id := fmt.Sprintf("agg-%d", k)
			for i := range perKey {
				err := begin(ctx, func(tx TTx) error {
					if err := domain(ctx, tx, id); err != nil {
						return err
					}
					evs, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: id, AggregateVersion: int64(i + 1),
						Type: "order.changed", Payload: fmt.Appendf(nil, `{"i":%d}`, i)})
					if err != nil {
						return err
					}
					mu.Lock()
					want[evs[0].PartitionKey] = append(want[evs[0].PartitionKey], evs[0].ID)
					all = append(all, evs[0].ID)
					mu.Unlock()
					return nil
				})
				if err != nil {
					perr <- fmt.Errorf("producer %s event %d: %w", id, i, err)
					return
				}
			}
		})
	}
	producers.Wait()
	close(perr)
	for err := range perr {
		require.NoError(t, err)
	}
	require.Len(t, all, keys*perKey)
	requireDeliveredSettled(t, s, sink, all, want)
}

// requireDeliveredSettled waits until sink acknowledged every event of all, checks the order
// per key against want, and waits until the store has nothing pending or parked.
func requireDeliveredSettled[TTx any](t *testing.T, s *Store[TTx], sink *conformance.Sink, all []string, want map[string][]string) {
	t.Helper()
	require.Eventually(t, func() bool { return sink.AllAcked(all) }, 60*time.Second, 20*time.Millisecond,
		"every committed event delivered through the pooler")
	require.Empty(t, sink.CheckOrder(want), "order per key")
	require.Eventually(t, func() bool {
		st, err := s.Stats(t.Context())
		return err == nil && st.Pending == 0 && st.Parked == 0
	}, 20*time.Second, 20*time.Millisecond, "every event settled")
}

// TestPoolerDrain: producers (Outbox.Write in the application's transaction, with a domain row)
// and two polling relays, all through PgBouncer, in transaction mode (each claim strategy, the
// two pgx modes of the README, and database/sql with default_query_exec_mode=exec in the
// connection string) and in session mode: every event is delivered, per key in write order.
// The relays' wake-ups (LISTEN) are refused through the pooler: they log why and poll.
func TestPoolerDrain(t *testing.T) {
	t.Parallel()
	testDSN(t)
	for _, c := range []struct {
		name     string
		env      string
		mode     pgx.QueryExecMode
		strategy ClaimStrategy
	}{
		{"transaction/exec/skip_locked", testkit.PgBouncerTxDSN, pgx.QueryExecModeExec, ClaimSkipLocked},
		{"transaction/simple_protocol/advisory_lock", testkit.PgBouncerTxDSN, pgx.QueryExecModeSimpleProtocol, ClaimAdvisoryLock},
		{"session/exec/skip_locked", testkit.PgBouncerSessionDSN, pgx.QueryExecModeExec, ClaimSkipLocked},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, pool := pooledStore(t, c.env, c.mode, Options{ClaimStrategy: c.strategy})
			var logs syncBuffer
			pooledDrain(t, s, func(ctx context.Context, fn func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, fn) },
				func(ctx context.Context, tx pgx.Tx, key string) error {
					_, err := tx.Exec(ctx, counterBumpIn(s.o.Schema), key)
					return err
				}, &logs)
			requireWakeupsRefusedLogged(t, logs.String())
		})
	}
	t.Run("transaction/database_sql", func(t *testing.T) {
		t.Parallel()
		schema := pooledSchema(t)
		db, err := sql.Open("pgx", testkit.Need(t, testkit.PgBouncerTxDSN)+"&default_query_exec_mode=exec")
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		db.SetMaxOpenConns(8)
		s, err := NewSQL(db, &Options{Schema: schema})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(t.Context()))
		var logs syncBuffer
		pooledDrain(t, s, func(ctx context.Context, fn func(*sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}, func(ctx context.Context, tx *sql.Tx, key string) error {
			_, err := tx.ExecContext(ctx, counterBumpIn(schema), key)
			return err
		}, &logs)
		requireWakeupsRefusedLogged(t, logs.String())
	})
}

// requireWakeupsRefusedLogged checks that the relays logged that their wake-ups are unavailable
// because of the pooler.
func requireWakeupsRefusedLogged(t *testing.T, logs string) {
	t.Helper()
	for _, want := range []string{"relay_wakeups_unavailable", ErrPooledConnection.Error(), "PoolerKeepsSessions"} {
		require.Contains(t, logs, want, "the relays log why they poll without wake-ups")
	}
}

// TestPoolerInbox: the inbox through PgBouncer in transaction mode: a redelivery (Process, and
// within and across ProcessBatch) runs nothing and the effect stays applied once.
func TestPoolerInbox(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, pool := pooledStore(t, testkit.PgBouncerTxDSN, pgx.QueryExecModeExec, Options{})
	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	effect := func(ctx context.Context, tx pgx.Tx, msg core.InboxMessage) error {
		_, err := tx.Exec(ctx, counterBumpIn(s.o.Schema), msg.EventID)
		return err
	}
	count := func(key string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, counterGetIn(s.o.Schema), key).Scan(&n))
		return n
	}
	msg := func(id string) core.InboxMessage {
		return core.InboxMessage{EventID: id, Payload: []byte(`{"id":"` + id + `"}`), OccurredAt: time.Now()}
	}
	for i := range 3 {
		res, err := in.Process(ctx, "c", msg("e1"), effect)
		require.NoError(t, err)
		if i == 0 {
			require.Equal(t, core.Applied, res.Outcome)
		} else {
			require.Equal(t, core.Duplicate, res.Outcome, "redelivery %d", i)
			require.Equal(t, core.Applied, res.Prior)
		}
	}
	require.Equal(t, 1, count("e1"))
	batch := []core.InboxMessage{msg("e2"), msg("e3"), msg("e2"), msg("e1")}
	for round := range 2 {
		res, err := in.ProcessBatch(ctx, "c", batch, func(ctx context.Context, tx pgx.Tx, _ int, m core.InboxMessage) error { return effect(ctx, tx, m) })
		require.NoError(t, err)
		want := []core.Outcome{core.Applied, core.Applied, core.Duplicate, core.Duplicate}
		if round == 1 {
			want = []core.Outcome{core.Duplicate, core.Duplicate, core.Duplicate, core.Duplicate}
		}
		got := make([]core.Outcome, len(res))
		for i, r := range res {
			got[i] = r.Outcome
		}
		require.Equal(t, want, got, "round %d", round)
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		require.Equal(t, 1, count(id), "effect of %s applied once", id)
	}
}

// livenessLocks counts the granted advisory locks of s's liveness class (seen directly).
func livenessLocks[TTx any](t *testing.T, s *Store[TTx]) int {
	t.Helper()
	var n int
	require.NoError(t, admin(t).QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid`,
		int64(uint32(s.n.liveKey))).Scan(&n))
	return n
}

// TestPoolerSessionFeatures: the sign of life (HoldLiveness) and the wake-ups (Wakeups) need a
// server session of their own. Through PgBouncer, in either pool mode, they are refused with
// ErrPooledConnection before anything is locked or listened; with Options.PoolerKeepsSessions
// they work through PgBouncer in session mode (and the lock ends with the client connection);
// a transaction pooler wrongly declared as keeping sessions is caught as soon as the sign of
// life's statements run in another server process.
func TestPoolerSessionFeatures(t *testing.T) {
	t.Parallel()
	testDSN(t)
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		for _, env := range []string{testkit.PgBouncerTxDSN, testkit.PgBouncerSessionDSN} {
			s, _ := pooledStore(t, env, pgx.QueryExecModeExec, Options{})
			_, err := s.HoldLiveness(t.Context(), "w")
			require.ErrorIs(t, err, ErrPooledConnection, env)
			require.ErrorContains(t, err, "PoolerKeepsSessions")
			require.Zero(t, livenessLocks(t, s), "%s: refused before the lock was taken", env)
			_, err = s.Wakeups(t.Context())
			require.ErrorIs(t, err, ErrPooledConnection, env)
		}
	})
	t.Run("session_mode_declared", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		s, _ := pooledStore(t, testkit.PgBouncerSessionDSN, pgx.QueryExecModeExec, Options{PoolerKeepsSessions: true})
		life, err := s.HoldLiveness(ctx, "w")
		require.NoError(t, err)
		require.NoError(t, life.Check(ctx))
		require.Equal(t, 1, livenessLocks(t, s))
		require.NoError(t, life.Release())
		// PgBouncer resets the server session (DISCARD ALL) when its client goes away.
		require.Eventually(t, func() bool { return livenessLocks(t, s) == 0 }, 5*time.Second, 10*time.Millisecond,
			"the lock ends with the client connection")

		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wake, err := s.Wakeups(wctx)
		require.NoError(t, err)
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(t, err)
		deadline := time.After(10 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for woken := false; !woken; {
			select {
			case <-wake:
				woken = true
			case <-tick.C:
				require.NoError(t, ob.Notify(ctx))
			case <-deadline:
				t.Fatal("no wake-up through the session pooler")
			}
		}
	})
	t.Run("transaction_mode_declared", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		s, pool := pooledStore(t, testkit.PgBouncerTxDSN, pgx.QueryExecModeExec, Options{PoolerKeepsSessions: true})
		life, err := s.HoldLiveness(ctx, "w")
		if err != nil { // the pooler already ran its statements in two server processes
			require.ErrorIs(t, err, ErrPooledConnection)
			t.Logf("HoldLiveness caught the pooler at once: %v", err)
			return
		}
		defer func() { _ = life.Release() }()
		held := life.(*pgLife).pid
		// Another client takes the idle server connection that holds the lock, in a
		// transaction: the sign of life's next statement must run elsewhere.
		other, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = other.Rollback(ctx) }()
		var pid uint32
		require.NoError(t, other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		if pid != held {
			t.Logf("PgBouncer gave the other client server process %d, not %d (the lock's): checking nothing more", pid, held)
			return
		}
		err = life.Check(ctx)
		require.ErrorIs(t, err, ErrPooledConnection, "the sign of life moved to another server process")
		t.Logf("Check: %v", err)
	})
}
