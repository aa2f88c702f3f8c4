package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
)

// InboxRecords implements reconcile.InboxReader: the records of consumer among ids, by event
// ID (absent IDs omitted), read outside any transaction, one ID at a time.
func (s *Store) InboxRecords(ctx context.Context, consumer string, ids []string) (map[string]driver.InboxRecord, error) {
	out := make(map[string]driver.InboxRecord, len(ids))
	for _, id := range ids {
		rec, err := scanInbox(s.db.QueryRowContext(ctx, s.q.selectInbox, selectInboxParams{Consumer: consumer, EventID: id}.args()...), consumer, id)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: inbox records: %w", classify(err))
		}
		out[id] = rec
	}
	return out, nil
}
