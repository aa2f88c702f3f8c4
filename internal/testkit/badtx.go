package testkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// InboxTxCalls calls each driver.InboxStore method that takes a transaction (Horizon,
// InsertRecord, LockVersion, SetVersion) with tx, and returns one line for each call whose
// error does not wrap core.ErrInvalidTx. An adapter's test passes a nil transaction, one that
// has ended, and one of another store or database: core.ErrInvalidTx promises all three are
// refused, with nothing written.
func InboxTxCalls[TTx any](ctx context.Context, s driver.InboxStore[TTx], tx TTx) []string {
	rec := driver.InboxRecord{Consumer: "c", EventID: "bad-tx", Outcome: core.Applied, OccurredAt: time.Now()}
	calls := []struct {
		name string
		call func() error
	}{
		{"Horizon", func() error { _, err := s.Horizon(ctx, tx, "c"); return err }},
		{"InsertRecord", func() error { _, _, err := s.InsertRecord(ctx, tx, rec); return err }},
		{"LockVersion", func() error { _, _, err := s.LockVersion(ctx, tx, "c", "entity"); return err }},
		{"SetVersion", func() error { return s.SetVersion(ctx, tx, "c", "entity", 7) }},
	}
	var bad []string
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, core.ErrInvalidTx) {
			bad = append(bad, fmt.Sprintf("%s: %v", c.name, err))
		}
	}
	return bad
}
