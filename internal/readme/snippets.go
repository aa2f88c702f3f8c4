// Package readme holds the Go blocks of README.md and of the pages of docs/ as compiled code.
// Each block is the text between a "readme:begin" comment, optionally followed by the page it
// belongs to (README.md when none), and a "readme:end" comment, one tab less indented.
// TestSnippets checks that every page shows exactly its blocks, in this order (readme_test.go
// first, then this file, then apptest_test.go, which TestPlaceOrder runs), TestQuickStart runs
// the README's quick start, and TestDocLinks checks every relative link of the pages. Edit a
// block here and in its page together.
package readme

import (
	"context"
	"database/sql"
	"log"
	"testing"
	"time"

	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/logical"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sns"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// sqsDeployment is the README's "SQS-based deployment" block (examples/sqsdeploy in full).
//
//lint:ignore U1000 compiled for the docs' Go block, never called
func sqsDeployment(ctx context.Context, pool, viewsPool *pgxpool.Pool, snsClient *awssns.Client,
	sqsClient *awssqs.Client, topicARN, queueURL, orderID, status string, payload []byte,
	handler sqs.Handler[pgx.Tx]) error {
	// readme:begin docs/sinks.md
	// Orders service: its outbox store is also the relay's store.
	store, err := postgres.New(pool, &postgres.Options{Schema: "orders"})
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders.orders
		(id text PRIMARY KEY, status text NOT NULL, version bigint NOT NULL)`); err != nil {
		return err
	}
	outbox, err := core.NewOutbox[pgx.Tx](ctx, store, nil)
	if err != nil {
		return err
	}

	// Producer: the order row and its event in ONE pgx transaction.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var version int64
		if err := tx.QueryRow(ctx, `INSERT INTO orders.orders AS o (id, status, version) VALUES ($1, $2, 1)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, version = o.version + 1
			RETURNING version`, orderID, status).Scan(&version); err != nil {
			return err
		}
		_, err := outbox.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: orderID,
			AggregateVersion: version, Type: "order.status_changed", Payload: payload})
		return err
	})
	if err != nil {
		return err
	}
	if err := outbox.Notify(ctx); err != nil { // after commit; sent in the background
		return err
	}
	// At shutdown, before pool.Close(): send the notifications still queued.
	if err := outbox.Flush(ctx); err != nil {
		return err
	}

	// Relay (orders service): outbox -> SNS FIFO topic, routed from configuration.
	sink, err := sns.New(snsClient, nil)
	if err != nil {
		return err
	}
	router := core.StaticRouter{ByType: map[string]string{"order.status_changed": topicARN}}
	relay, err := core.NewRelay(store, sink, router, nil)
	if err != nil {
		return err
	}
	go func() {
		if err := relay.Run(ctx); err != nil {
			log.Printf("relay: %v", err)
		}
	}()

	// Consumer (order-views service): SQS -> inbox + projection in one transaction; the message
	// is deleted only after that transaction committed.
	inboxStore, err := postgres.New(viewsPool, &postgres.Options{Schema: "views"})
	if err != nil {
		return err
	}
	if err := inboxStore.Migrate(ctx); err != nil {
		return err
	}
	inbox, err := core.NewInbox(ctx, inboxStore, nil)
	if err != nil {
		return err
	}
	consumer, err := sqs.NewConsumer(sqsClient, queueURL, inbox, "order-views", handler, nil)
	if err != nil {
		return err
	}
	return consumer.Run(ctx)
	// readme:end
}

// cdcRelay is the README's "Change data capture (CDC)" block.
//
//lint:ignore U1000 compiled for the docs' Go block, never called
func cdcRelay(ctx context.Context, store *postgres.Store[pgx.Tx], sink core.Sink, router core.Router) error {
	// readme:begin docs/cdc.md
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	src, err := logical.NewChangeSource(store, nil) // a slot + publication; MySQL/MariaDB: binlog.NewChangeSource
	if err != nil {
		return err
	}
	relay, err := core.NewCDCRelay(store, src, sink, router, &core.CDCOptions{MaxRetainedBytes: 8 << 30})
	if err != nil {
		return err
	}
	return relay.Run(ctx) // nil when ctx ends; ErrFenced, ErrClaimLost, *PositionLostError, *RetentionError otherwise
	// readme:end
}

// docs/writing-an-adapter.md's block: an adapter's own test file. newStore, incr and
// count stand for the adapter author's code.
var (
	newStore func(t *testing.T, lanes int) conformance.Adapter[*sql.Tx]
	incr     func(ctx context.Context, tx *sql.Tx, key string) error
	count    func(ctx context.Context, a conformance.Adapter[*sql.Tx], key string) (int, error)
)

// readme:begin docs/writing-an-adapter.md
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness[*sql.Tx]{
		New:         newStore, // a freshly migrated, empty schema with this lane count
		Effect:      incr,     // the domain effect: counter[key] += 1 in tx
		EffectCount: count,    // reads counter[key]
		// What the adapter offers beyond the required contracts: an undeclared one it
		// implements, or a declared one it lacks, fails the run.
		Capabilities: conformance.Notifier | conformance.OperatorStore,
	})
}

// readme:end

// partitionedInbox is docs/postgres.md's "Partitioned inbox" block.
//
//lint:ignore U1000 compiled for the docs' Go block, never called
func partitionedInbox(ctx context.Context, pool *pgxpool.Pool) (*core.Inbox[pgx.Tx], error) {
	// readme:begin docs/postgres.md
	store, err := postgres.New(pool, &postgres.Options{
		InboxPartitioning: &postgres.Partitioning{Interval: 7 * 24 * time.Hour, Ahead: 2},
	})
	if err != nil {
		return nil, err
	}
	if err := store.MigrateInbox(ctx); err != nil { // or Migrate
		return nil, err
	}
	return core.NewInbox[pgx.Tx](ctx, store, nil)
	// readme:end
}
