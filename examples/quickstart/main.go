// Command quickstart is outboxkit's five-minute path, on one machine with nothing to install:
// a SQLite database, the in-process broker of sinks/memory, and the three roles of the library.
//
//	go run ./examples/quickstart
//
// The producer credits two accounts and writes one event per credit in the same transaction;
// a relay publishes the committed events to the broker; a consumer applies each delivery
// through an inbox in its own transaction, and shows that a redelivery changes nothing. It
// prints what happened and exits 0. The database is a file in a temporary directory, removed
// at the end.
//
// With -produce-only it runs the producer alone and keeps the database, so that the relay
// daemon can publish its events (README, "The relay as a process"):
//
//	go run ./examples/quickstart -produce-only -db app.db
//	go run ./cmd/outboxkit relay --config examples/quickstart/relay.yaml
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/memory"
)

func main() {
	// The library logs with slog; keep this walk-through's output to what it prints itself.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	dbPath := flag.String("db", "", "keep the SQLite database in this file (default: a temporary file, removed at the end)")
	produceOnly := flag.Bool("produce-only", false, "write the events and stop: no relay, no consumer (run `outboxkit relay` next)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := quickstart(ctx, *dbPath, *produceOnly); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// quickstart runs the walk-through on the database at path, or on a temporary one that it
// removes when path is empty.
func quickstart(ctx context.Context, path string, produceOnly bool) error {
	if path == "" {
		dir, err := os.MkdirTemp("", "outboxkit-quickstart-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "app.db")
	}
	return run(ctx, path, produceOnly, os.Stdout)
}

// credit is the payload of an "account.credited" event.
type credit struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
}

func run(ctx context.Context, path string, produceOnly bool, out io.Writer) error {
	// 1. Open the database and create the outbox and inbox tables (idempotent).
	db, err := sqlite.OpenDB(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.New(db, nil)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	// The application's own tables: the producer's accounts, the consumer's ledger.
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ledger (account TEXT PRIMARY KEY, total INTEGER NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}

	// 2. Producer: the domain change and its event commit in ONE transaction, or neither does.
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		account string
		amount  int
	}{{"alice", 10}, {"bob", 5}, {"alice", 7}} {
		payload, _ := json.Marshal(credit{Account: c.account, Amount: c.amount})
		err := store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (?, ?)
				ON CONFLICT (id) DO UPDATE SET balance = balance + excluded.balance`, c.account, c.amount); err != nil {
				return err // the event is not written either
			}
			_, err := ob.Write(ctx, tx, core.Event{
				AggregateType: "account", AggregateID: c.account, Type: "account.credited",
				Destination: "ledger", Payload: payload,
			})
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "producer: credited %s with %d and wrote account.credited in the same transaction\n", c.account, c.amount)
	}

	if produceOnly {
		fmt.Fprintf(out, "events left for the relay in %s\n", path)
		return nil
	}

	// 3. Relay: publishes committed events to the broker, in order per account, and marks them
	// published once the broker acknowledged them.
	broker, err := memory.NewBroker(nil) // the in-process broker; in production SQS, Kafka, ...
	if err != nil {
		return err
	}
	router := core.StaticRouter{ByDestination: map[string]string{"ledger": "ledger-queue"}}
	relay, err := core.NewRelay(store, broker, router, &core.RelayOptions{PollInterval: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	running := core.Start(ctx, relay) // Run in its own goroutine; Stop below stops it gracefully

	// 4. Consumer: applies each delivery once, in its own transaction, through the inbox.
	inbox, err := core.NewInbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		return err
	}
	apply := func(ctx context.Context, tx *sql.Tx, m core.InboxMessage) error {
		var c credit
		if err := json.Unmarshal(m.Payload, &c); err != nil {
			return core.Permanent(err) // a poison message: never retried
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (account, total) VALUES (?, ?)
			ON CONFLICT (account) DO UPDATE SET total = total + excluded.total`, c.Account, c.Amount)
		return err
	}
	for i := 0; i < 3; i++ {
		var msg core.Message
		select {
		case msg = <-broker.Deliveries():
		case <-ctx.Done():
			return fmt.Errorf("waiting for delivery %d: %w", i+1, ctx.Err())
		}
		// The one mapping of a delivered event to what the inbox records (id, payload, time,
		// and a version gate when the event has an AggregateVersion).
		in := core.InboxMessageOf(&msg.Event, msg.CreatedAt, "")
		res, err := inbox.Process(ctx, "ledger", in, apply)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "consumer: event %s for %s: %s\n", msg.ID, msg.AggregateID, res.Outcome)
		if i == 0 { // a broker may deliver twice: the inbox makes the second one a no-op
			res, err := inbox.Process(ctx, "ledger", in, apply)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "consumer: the same event again: %s (no effect)\n", res.Outcome)
		}
	}

	// 5. Stop the relay gracefully: it settles what is in flight and releases its lanes.
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := running.Stop(stopCtx); err != nil {
		return err
	}

	// What the two sides now hold.
	rows, err := db.QueryContext(ctx, `SELECT a.id, a.balance, coalesce(l.total, 0)
		FROM accounts a LEFT JOIN ledger l ON l.account = a.id ORDER BY a.id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var balance, total int
		if err := rows.Scan(&id, &balance, &total); err != nil {
			return err
		}
		fmt.Fprintf(out, "result: %s balance=%d ledger=%d\n", id, balance, total)
		if balance != total {
			return fmt.Errorf("%s: the ledger (%d) does not match the balance (%d)", id, total, balance)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	st, err := store.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "outbox: %d published, %d pending\n", st.Published, st.Pending)
	return nil
}
