package postgres

import (
	"context"

	"github.com/outboxkit/outbox/adapters/postgres/internal/bridge"
)

// The change source lives in package logical (adapters/postgres/logical), so that a program
// that only polls does not link the logical replication client; it reaches the Store through
// package bridge.
func init() {
	bridge.Of = func(store any) bridge.Store {
		return store.(interface{ bridge() bridge.Store }).bridge()
	}
}

func (s *Store[TTx]) bridge() bridge.Store {
	return bridge.Store{
		Schema:      s.n.rawSchema,
		Table:       s.n.rawTable,
		Outbox:      s.n.outbox,
		Partitioned: s.o.Partitioning != nil,
		Logger:      s.log,
		Exec:        s.db.exec,
		QueryRow: func(ctx context.Context, sql string, args []any, dest ...any) error {
			return queryRow(ctx, s.db, sql, args, dest...)
		},
		ConnConfig: s.connConfig,
		Classify:   classify,
	}
}
