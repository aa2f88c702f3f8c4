package readme

import (
	"context"
	"database/sql"
	"log"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
)

// quickStart is the README's "Quick start" block: sink is where the relay publishes, received
// is where the consumer's broker client delivers.
func quickStart(ctx context.Context, sink core.Sink, received <-chan core.Message) error {
	// readme:begin
	db, err := sqlite.OpenDB(ctx, "app.db") // WAL, busy timeout, immediate transactions
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.New(db, nil) // default table names, 64 lanes
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil { // embedded, idempotent migrations
		return err
	}
	// The application's own tables: the producer's accounts and the consumer's ledger.
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ledger (account TEXT PRIMARY KEY, total INTEGER NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		return err
	}

	// Producer: domain change + event in ONE transaction (InTx commits, or rolls back on error).
	err = store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES ('a1', 10)
			ON CONFLICT (id) DO UPDATE SET balance = balance + 10`); err != nil {
			return err // the event is not written either
		}
		_, err := ob.Write(ctx, tx, core.Event{
			AggregateType: "account", AggregateID: "a1", Type: "account.credited",
			Destination: "ledger", Payload: []byte(`{"amount":10}`),
		})
		return err
	})
	if err != nil {
		return err
	}
	if err := ob.Notify(ctx); err != nil { // optional: wake local relays now, not at their next poll
		return err
	}

	// Relay: run as many as you like; lanes are leased and fenced. Run returns when its ctx
	// ends, after releasing its lanes: stop it before closing db.
	router := core.StaticRouter{ByDestination: map[string]string{"ledger": "queue-url-or-topic"}}
	relay, err := core.NewRelay(store, sink, router, nil)
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	defer func() {
		stopRelay()
		if err := <-relayDone; err != nil {
			log.Printf("relay: %v", err)
		}
	}()

	// Consumer: apply each event once, in the consumer's own transaction.
	inbox, err := core.NewInbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		return err
	}
	msg := <-received // an event as the broker delivered it
	res, err := inbox.Process(ctx, "ledger-projection", core.InboxMessage{
		EventID: msg.ID, Payload: msg.Payload, OccurredAt: msg.CreatedAt,
	}, func(ctx context.Context, tx *sql.Tx, m core.InboxMessage) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (account, total) VALUES ('a1', 10)
			ON CONFLICT (account) DO UPDATE SET total = total + 10`)
		return err
	})
	if err != nil {
		return err
	}
	log.Printf("event %s: %s", msg.ID, res.Outcome)
	// readme:end
	return nil
}

// TestQuickStart runs the quick start in a fresh directory: the event reaches the sink, the
// consumer applies it once, and the producer's and consumer's rows are there.
func TestQuickStart(t *testing.T) {
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	received := make(chan core.Message, 16)
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		for _, m := range msgs {
			received <- m
		}
		return make([]error, len(msgs))
	})
	require.NoError(t, quickStart(ctx, sink, received))

	db, err := sqlite.OpenDB(ctx, "app.db")
	require.NoError(t, err)
	defer db.Close()
	var balance, total int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 'a1'`).Scan(&balance))
	require.NoError(t, db.QueryRowContext(ctx, `SELECT total FROM ledger WHERE account = 'a1'`).Scan(&total))
	require.Equal(t, 10, balance)
	require.Equal(t, 10, total)
	var event string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT type FROM outbox`).Scan(&event))
	require.Equal(t, "account.credited", event)
}

var (
	readmeBlock  = regexp.MustCompile("(?ms)^```go\n(.*?)^```\n")
	snippetBlock = regexp.MustCompile(`(?ms)^([ \t]*)// readme:begin\n(.*?)^[ \t]*// readme:end\n`)
)

// snippets returns the readme:begin ... readme:end regions of the files, in order, dedented by
// the indentation of their begin line and without surrounding blank lines.
func snippets(t *testing.T, files ...string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range snippetBlock.FindAllStringSubmatch(string(src), -1) {
			indent, body := m[1], m[2]
			lines := strings.Split(strings.Trim(body, "\n"), "\n")
			for i, l := range lines {
				lines[i] = strings.TrimPrefix(l, indent)
			}
			out = append(out, strings.Join(lines, "\n"))
		}
	}
	return out
}

// TestSnippets checks that README.md's Go blocks are exactly the compiled snippets of this
// package, so every block compiles and checks its errors.
func TestSnippets(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var blocks []string
	for _, m := range readmeBlock.FindAllStringSubmatch(string(readme), -1) {
		blocks = append(blocks, strings.Trim(m[1], "\n"))
	}
	want := snippets(t, "readme_test.go", "snippets.go", "apptest_test.go")
	require.Len(t, want, 5, "the snippets of this package")
	require.Equal(t, want, blocks, "README.md's Go blocks must be this package's snippets (readme_test.go, snippets.go, then apptest_test.go)")
}
