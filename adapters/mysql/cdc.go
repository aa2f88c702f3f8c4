package mysql

import (
	"github.com/outboxkit/outbox/adapters/mysql/internal/bridge"
	"github.com/outboxkit/outbox/core/driver"
)

// The change source lives in package binlog (adapters/mysql/binlog), so that a program that
// only polls does not link the binlog reader; it reaches the Store through package bridge.
func init() {
	bridge.Of = func(store any) bridge.Store {
		s := store.(*Store)
		return bridge.Store{
			DB:         s.db,
			DSN:        s.o.DSN,
			Database:   s.database,
			Outbox:     s.names.outbox,
			Checkpoint: s.names.checkpoint,
			Logger:     s.log,
			Wrap:       wrap,
		}
	}
}

// The Store keeps the CDC checkpoint (driver.CheckpointStore): a CDC relay runs on it with a
// binlog.ChangeSource.
var _ driver.CDCStore = (*Store)(nil)
