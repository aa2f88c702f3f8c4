package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/memory"
)

type demoConfig struct {
	duration     time.Duration
	producers    int
	workers      int
	accounts     int
	lanes        int
	batch        int
	maxEvents    int
	rate         int
	chaos        bool
	seed         uint64
	dir          string
	drainTimeout time.Duration
	verbose      bool
	// wrapSink, when set, wraps the broker's sink (tests break it on purpose).
	wrapSink func(core.Sink) core.Sink
}

// demoCommand is `outboxkit demo`.
func demoCommand() *cobra.Command {
	var c demoConfig
	cmd := &cobra.Command{
		Use:   "demo [--chaos] [flags]",
		Short: "run producers, relays and a consumer on an embedded SQLite outbox and verify that nothing is lost or reordered (--chaos kills workers and breaks the broker)",
		Long: `Run producers, relay workers and a consumer on embedded SQLite outboxes (a temporary directory
by default) with the in-process broker, then check that every committed event was delivered
once to the consumer's inbox, in order per key, and no rolled-back event was.

Every second it prints a progress line: written (events committed by the producers), pending
(not yet published), published (marked published in the outbox), delivered (applied by the
consumer's inbox), duplicates (deliveries the inbox absorbed as already applied), kills (relay
workers killed by --chaos) and claim_lost (batches a worker could not mark published because it
had lost its lane: sent again by the next owner, hence duplicates). Without --chaos the workers
use the library's default lease (` + core.DefaultLeaseTTL.String() + `), so a loaded machine shows no claim_lost; with
--chaos a 2s lease lets replacements take a killed worker's lanes quickly. The last line is the
verdict: ok, or FAIL with what went wrong (exit status 1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.check(); err != nil {
				return usageErr(cmd, "%v", err)
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			ok, err := demo(cmd.Context(), c, stdout, stderr)
			if err != nil {
				fmt.Fprintln(stderr, "outboxkit demo:", err)
				fmt.Fprintf(stdout, "verdict: FAIL error=%q\n", err.Error())
				return &exitError{code: 1}
			}
			if !ok {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&c.duration, "duration", 6*time.Second, "how long producers write")
	fs.IntVar(&c.producers, "producers", 4, "concurrent producer goroutines")
	fs.IntVar(&c.workers, "workers", 3, "relay workers")
	fs.IntVar(&c.accounts, "accounts", 40, "domain rows (each one partition key)")
	fs.IntVar(&c.lanes, "lanes", 16, "outbox lanes")
	fs.IntVar(&c.batch, "batch", 200, "relay batch size")
	fs.IntVar(&c.rate, "rate", 2000, "committed events per second, all producers together (0: as fast as possible)")
	fs.IntVar(&c.maxEvents, "events", 0, "stop producing after this many committed events (0: no limit)")
	fs.BoolVar(&c.chaos, "chaos", false, "kill and crash relay workers at random (2s leases), make the broker reject, lose acks and duplicate")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed (0: random)")
	fs.StringVar(&c.dir, "dir", "", "directory for the SQLite files (default: a temporary directory, removed afterwards)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 30*time.Second, "how long to wait for delivery after producers stop")
	fs.BoolVarP(&c.verbose, "verbose", "v", false, "log relay warnings to stderr")
	return cmd
}

// check refuses a bad configuration and picks a random seed when none is given.
func (c *demoConfig) check() error {
	switch {
	case c.duration <= 0:
		return errors.New("--duration must be positive")
	case c.producers < 1 || c.workers < 1 || c.accounts < 1:
		return errors.New("--producers, --workers and --accounts must be at least 1")
	case c.lanes < 1 || c.lanes > core.MaxLanes:
		return fmt.Errorf("--lanes must be between 1 and %d", core.MaxLanes)
	case c.batch < 1:
		return errors.New("--batch must be at least 1")
	case c.rate < 0 || c.maxEvents < 0:
		return errors.New("--rate and --events must not be negative")
	}
	if c.seed == 0 {
		c.seed = rand.Uint64()
	}
	return nil
}

// credit is the demo's event payload.
type credit struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// ledger is what the producers committed and what the consumer applied, for the verdict.
type ledger struct {
	mu          sync.Mutex
	committed   map[string]bool // event id -> committed
	rolledBack  map[string]bool
	applied     map[string]bool
	lastVer     map[string]int64 // entity -> last applied version (consumer side)
	dups        int
	violations  int
	consumerErr int
}

func newLedger() *ledger {
	return &ledger{committed: map[string]bool{}, rolledBack: map[string]bool{}, applied: map[string]bool{}, lastVer: map[string]int64{}}
}

func (l *ledger) counts() (written, applied, dups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.committed), len(l.applied), l.dups
}

func demo(ctx context.Context, cfg demoConfig, stdout, stderr io.Writer) (bool, error) {
	dir := cfg.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "outboxkit-demo-")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	logger := slog.New(slog.DiscardHandler)
	if cfg.verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}

	// The producer's database holds the domain table and the outbox: one local transaction
	// covers both. The consumer has its own database with its projection and its inbox.
	prodDB, prod, err := openSQLite(ctx, filepath.Join(dir, "producer.db"), cfg.lanes, logger)
	if err != nil {
		return false, err
	}
	defer prodDB.Close()
	consDB, cons, err := openSQLite(ctx, filepath.Join(dir, "consumer.db"), cfg.lanes, logger)
	if err != nil {
		return false, err
	}
	defer consDB.Close()
	if _, err := prodDB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL, version INTEGER NOT NULL)`); err != nil {
		return false, err
	}
	for i := 0; i < cfg.accounts; i++ {
		if _, err := prodDB.ExecContext(ctx, `INSERT OR IGNORE INTO accounts (id, balance, version) VALUES (?, 0, 0)`, accountID(i)); err != nil {
			return false, err
		}
	}
	if _, err := consDB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS balances (id TEXT PRIMARY KEY, balance INTEGER NOT NULL, version INTEGER NOT NULL)`); err != nil {
		return false, err
	}

	ob, err := core.NewOutbox[*sql.Tx](ctx, prod, nil)
	if err != nil {
		return false, err
	}
	inbox, err := core.NewInbox[*sql.Tx](ctx, cons, nil)
	if err != nil {
		return false, err
	}
	bopts := &memory.Options{Seed: cfg.seed, Buffer: 4096}
	if cfg.chaos {
		bopts.RejectRate, bopts.AckLossRate, bopts.DuplicateRate = 0.05, 0.03, 0.05
	}
	broker, err := memory.NewBroker(bopts)
	if err != nil {
		return false, err
	}
	router := core.StaticRouter{ByDestination: map[string]string{"ledger": "memory://ledger"}}
	led := newLedger()
	fmt.Fprintf(stdout, "demo: dir=%s producers=%d workers=%d accounts=%d lanes=%d chaos=%v seed=%d lease=%s\n",
		dir, cfg.producers, cfg.workers, cfg.accounts, cfg.lanes, cfg.chaos, cfg.seed, cfg.leaseTTL())
	fmt.Fprintln(stdout, "legend: written=committed, pending=not yet published, published=marked in the outbox, delivered=applied by the inbox, duplicates=redeliveries it absorbed, kills=workers killed (--chaos), claim_lost=batches resent after a lost lease")

	// Consumer.
	consCtx, stopConsumer := context.WithCancel(ctx)
	var consWG sync.WaitGroup
	consWG.Go(func() { consume(consCtx, broker, inbox, led) })

	// Relay workers, supervised (and, with --chaos, killed at random).
	relayCtx, stopRelays := context.WithCancel(ctx)
	var sink core.Sink = broker
	if cfg.wrapSink != nil {
		sink = cfg.wrapSink(broker)
	}
	sup := &supervisor{
		store: prod, sink: sink, router: router, logger: logger, cfg: cfg,
		rnd: rand.New(rand.NewPCG(cfg.seed, 1)),
	}
	sup.start(relayCtx)

	// Producers.
	prodCtx, stopProducers := context.WithTimeout(ctx, cfg.duration)
	var prodWG sync.WaitGroup
	var budget atomic.Int64
	budget.Store(int64(cfg.maxEvents))
	for p := 0; p < cfg.producers; p++ {
		prodWG.Go(func() {
			rnd := rand.New(rand.NewPCG(cfg.seed, uint64(p)+100))
			produce(prodCtx, prodDB, ob, rnd, cfg, &budget, led, stderr)
		})
	}

	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	progress := func(phase string) {
		st, _ := prod.Stats(ctx)
		w, a, d := led.counts()
		fmt.Fprintf(stdout, "progress t=%.0fs phase=%s written=%d pending=%d published=%d delivered=%d duplicates=%d kills=%d claim_lost=%d\n",
			time.Since(start).Seconds(), phase, w, st.Pending, st.Published, a, d, sup.kills.Load(), sup.claimLost())
	}
	produced := make(chan struct{})
	go func() { prodWG.Wait(); close(produced) }()
wait:
	for {
		select {
		case <-produced:
			break wait
		case <-tick.C:
			progress("produce")
		}
	}
	stopProducers()
	if ctx.Err() != nil {
		stopRelays()
		sup.wait()
		stopConsumer()
		consWG.Wait()
		return false, ctx.Err()
	}

	// Drain: wait until every committed event was published and applied.
	deadline := time.Now().Add(cfg.drainTimeout)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for drained := false; !drained; {
		select {
		case <-ctx.Done():
		case <-tick.C:
			progress("drain")
		case <-poll.C:
		}
		st, err := prod.Stats(ctx)
		w, a, _ := led.counts()
		drained = err == nil && st.Pending == 0 && a >= w
		if !drained && (time.Now().After(deadline) || ctx.Err() != nil) {
			break
		}
	}
	sup.stopChaos()
	// Let stragglers (duplicates still in the broker) reach the consumer, then stop everything.
	time.Sleep(200 * time.Millisecond)
	stopRelays()
	sup.wait()
	stopConsumer()
	consWG.Wait()
	progress("done")
	return verdict(ctx, prodDB, consDB, prod, led, broker, stdout)
}

func openSQLite(ctx context.Context, path string, lanes int, logger *slog.Logger) (*sql.DB, *sqlite.Store, error) {
	db, err := sqlite.OpenDB(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	st, err := sqlite.New(db, &sqlite.Options{Lanes: lanes, Logger: logger})
	if err == nil {
		err = st.Migrate(ctx)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, st, nil
}

func accountID(i int) string { return fmt.Sprintf("acct-%03d", i) }

// produce commits transactions that credit one account and append 1-3 events for it, until ctx
// ends. One in twenty transactions is rolled back after writing its events: those must never
// be published.
func produce(ctx context.Context, db *sql.DB, ob *core.Outbox[*sql.Tx], rnd *rand.Rand, cfg demoConfig, budget *atomic.Int64, led *ledger, stderr io.Writer) {
	start, sent := time.Now(), 0
	for ctx.Err() == nil {
		if cfg.rate > 0 { // pace this producer at its share of --rate
			due := start.Add(time.Duration(float64(sent) / float64(cfg.rate) * float64(cfg.producers) * float64(time.Second)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(due)):
			}
		}
		n := 1 + rnd.IntN(3)
		if cfg.maxEvents > 0 && budget.Add(-int64(n)) < 0 {
			return
		}
		acct := accountID(rnd.IntN(cfg.accounts))
		rollback := rnd.IntN(20) == 0
		ids, err := creditTx(ctx, db, ob, acct, n, rnd, rollback)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintln(stderr, "producer:", err)
			}
			continue
		}
		sent += len(ids)
		led.mu.Lock()
		for _, id := range ids {
			if rollback {
				led.rolledBack[id] = true
			} else {
				led.committed[id] = true
			}
		}
		led.mu.Unlock()
		if !rollback {
			_ = ob.Notify(ctx)
		}
	}
}

func creditTx(ctx context.Context, db *sql.DB, ob *core.Outbox[*sql.Tx], acct string, n int, rnd *rand.Rand, rollback bool) ([]string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	events := make([]core.Event, n)
	var total int64
	for i := range events {
		amount := 1 + rnd.Int64N(100)
		total += amount
		payload, _ := json.Marshal(credit{Account: acct, Amount: amount})
		events[i] = core.Event{AggregateType: "account", AggregateID: acct, Type: "account.credited",
			Destination: "ledger", Payload: payload, Headers: map[string]string{"demo": "true"}}
	}
	var version int64
	if err := tx.QueryRowContext(ctx, `UPDATE accounts SET balance = balance + ?, version = version + ? WHERE id = ? RETURNING version`,
		total, n, acct).Scan(&version); err != nil {
		return nil, fmt.Errorf("update account: %w", err)
	}
	for i := range events {
		events[i].AggregateVersion = version - int64(n-1-i)
	}
	written, err := ob.Write(ctx, tx, events...)
	if err != nil {
		return nil, fmt.Errorf("write outbox: %w", err)
	}
	ids := make([]string, len(written))
	for i, ev := range written {
		ids[i] = ev.ID
	}
	if rollback {
		return ids, tx.Rollback()
	}
	return ids, tx.Commit()
}

// consume applies deliveries through the inbox: a projection of balances, gated by the
// account version so that a reordering shows up as a violation.
func consume(ctx context.Context, broker *memory.Broker, inbox *core.Inbox[*sql.Tx], led *ledger) {
	var n int64
	for {
		var m core.Message
		select {
		case <-ctx.Done():
			return
		case m = <-broker.Deliveries():
		}
		n++
		msg := core.InboxMessage{
			EventID: m.ID, Payload: m.Payload, Entity: m.PartitionKey, Version: m.AggregateVersion,
			OccurredAt: m.CreatedAt, SourcePosition: fmt.Sprintf("memory:%d", n),
		}
		var res core.InboxResult
		var err error
		for try := 0; try < 5; try++ { // transient database errors (e.g. busy) are retried
			res, err = inbox.Process(ctx, "ledger", msg, applyCredit)
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		led.mu.Lock()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				led.consumerErr++
			}
		case res.Outcome == core.Duplicate:
			led.dups++
		case res.Outcome == core.Stale:
			led.violations++ // an older version arrived after a newer one was applied
		case res.Outcome == core.Applied:
			if led.lastVer[msg.Entity]+1 != msg.Version {
				led.violations++
			}
			led.lastVer[msg.Entity] = msg.Version
			led.applied[m.ID] = true
		}
		led.mu.Unlock()
	}
}

func applyCredit(ctx context.Context, tx *sql.Tx, msg core.InboxMessage) error {
	var c credit
	if err := json.Unmarshal(msg.Payload, &c); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO balances (id, balance, version) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET balance = balance + excluded.balance, version = excluded.version`,
		c.Account, c.Amount, msg.Version)
	return err
}

func verdict(ctx context.Context, prodDB, consDB *sql.DB, prod *sqlite.Store, led *ledger, broker *memory.Broker, stdout io.Writer) (bool, error) {
	st, err := prod.Stats(ctx)
	if err != nil {
		return false, err
	}
	want, err := balances(ctx, prodDB, `SELECT id, balance FROM accounts`)
	if err != nil {
		return false, err
	}
	got, err := balances(ctx, consDB, `SELECT id, balance FROM balances`)
	if err != nil {
		return false, err
	}
	mismatch := 0
	for id, b := range want {
		if got[id] != b {
			mismatch++
		}
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	lost, phantom := 0, 0
	for id := range led.committed {
		if !led.applied[id] {
			lost++
		}
	}
	for id := range led.rolledBack {
		if led.applied[id] {
			phantom++
		}
	}
	written, delivered := len(led.committed), len(led.applied)-phantom
	bs := broker.Stats()
	fmt.Fprintf(stdout, "broker: accepted=%d rejected=%d ack_lost=%d duplicated=%d held_back=%d; rolled_back_events=%d\n",
		bs.Accepted, bs.Rejected, bs.AckLost, bs.Duplicated, bs.HeldBack, len(led.rolledBack))
	ok := lost == 0 && led.violations == 0 && phantom == 0 && mismatch == 0 && st.Parked == 0 &&
		led.consumerErr == 0 && st.Published == int64(written) && st.Pending == 0 && written > 0
	line := fmt.Sprintf("written=%d published=%d delivered=%d duplicates_absorbed=%d lost=%d order_violations=%d",
		written, st.Published, delivered, led.dups, lost, led.violations)
	if ok {
		fmt.Fprintln(stdout, "verdict: ok "+line)
		return true, nil
	}
	fmt.Fprintf(stdout, "verdict: FAIL %s phantom=%d balance_mismatches=%d parked=%d pending=%d consumer_errors=%d\n",
		line, phantom, mismatch, st.Parked, st.Pending, led.consumerErr)
	return false, nil
}

func balances(ctx context.Context, db *sql.DB, q string) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			return nil, err
		}
		out[id] = b
	}
	return out, rows.Err()
}
