package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core/driver"
)

// InboxRecords implements reconcile.InboxReader: the records of consumer among ids, by event
// ID (absent IDs omitted), read outside any transaction in one statement. A record's key is
// (consumer, source, tenant, event ID): when records of several sources or tenants share an
// ID, the one returned for it is any one of them (each says its Source and Tenant). The
// statement finds the consumer's (source, tenant) scopes with a few primary-key seeks each
// and then looks every ID up in every scope by its full key, so its cost grows with the number
// of IDs times the number of scopes, not with the consumer's record count. An inbox whose
// migrations are behind returns CheckInbox's *core.NotMigratedError.
func (s *Store) InboxRecords(ctx context.Context, consumer string, ids []string) (map[string]driver.InboxRecord, error) {
	out := make(map[string]driver.InboxRecord, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	// An inbox of an earlier version lacks the key's columns: say so, with the remedy.
	if err := s.CheckInbox(ctx); err != nil {
		return nil, err
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("sqlite: inbox records: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, s.q.selectInboxByIDs, selectInboxByIDsParams{Consumer: consumer, IDs: string(list)}.args()...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: inbox records: %w", classify(err))
	}
	for rows.Next() {
		rec := driver.InboxRecord{Consumer: consumer}
		if err := scanInbox(rows, &rec, &rec.EventID, &rec.Source, &rec.Tenant); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: inbox records: %w", classify(err))
		}
		if _, ok := out[rec.EventID]; !ok {
			out[rec.EventID] = rec
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("sqlite: inbox records: %w", classify(err))
	}
	return out, nil
}
