package logical_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/logical"
	"github.com/outboxkit/outbox/core"
)

// A CDC relay publishes from PostgreSQL's logical replication instead of polling. The server
// needs wal_level=logical; the relay's role needs the REPLICATION attribute, and its first Start
// creates the publication (as the outbox table's owner: see grants.sql).
func ExampleNewChangeSource() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	// Slot "outboxkit_public_outbox" on publication "outboxkit_public_outbox", over a
	// replication connection with the pool's settings.
	source, err := logical.NewChangeSource(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	var sink core.Sink // e.g. an SQS or Kafka sink
	relay, err := core.NewCDCRelay(store, source, sink, core.StaticRouter{Default: "orders"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run // relay.Run(ctx) blocks until ctx is cancelled
	// A retired CDC relay's slot retains WAL until it is dropped:
	_ = source.DropSlot
}
