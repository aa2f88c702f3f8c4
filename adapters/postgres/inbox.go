package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Horizon returns the consumer's retention horizon (zero when never pruned). It takes no lock:
// in a read committed transaction each statement sees what committed before it began, and
// Inbox.Process calls it after InsertRecord (see driver.InboxStore).
func (s *Store[TTx]) Horizon(ctx context.Context, tx TTx, consumer string) (time.Time, error) {
	var h pgtype.Timestamptz
	err := queryRow(ctx, s.txq(tx), s.q.horizonGet, horizonGetParams{Consumer: consumer}.args(), &h)
	if errors.Is(err, errNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("postgres: horizon: %w", classify(err))
	}
	return tsOut(h), nil
}

// InsertRecord is InsertRecords of rec alone.
func (s *Store[TTx]) InsertRecord(ctx context.Context, tx TTx, rec driver.InboxRecord) (driver.InboxRecord, bool, error) {
	existing, inserted, err := s.InsertRecords(ctx, tx, []driver.InboxRecord{rec})
	if err != nil {
		return driver.InboxRecord{}, false, err
	}
	return existing[0], inserted[0], nil
}

// InboxRecords implements reconcile.InboxReader: the records of consumer among ids, by event
// ID (absent IDs omitted), read outside any transaction, in one statement. Where records of
// several sources or tenants share an event ID, it returns one of them.
func (s *Store[TTx]) InboxRecords(ctx context.Context, consumer string, ids []string) (map[string]driver.InboxRecord, error) {
	r, err := s.db.query(ctx, s.q.inboxGetByID, inboxGetByIDParams{Consumer: consumer, EventIDs: ids}.args()...)
	if err != nil {
		return nil, fmt.Errorf("postgres: inbox records: %w", classify(err))
	}
	out := map[string]driver.InboxRecord{}
	err = scanInbox(r, consumer, func(rec driver.InboxRecord) { out[rec.EventID] = rec })
	if err != nil {
		return nil, fmt.Errorf("postgres: inbox records: %w", classify(err))
	}
	return out, nil
}

// occurredIn stores the zero time as 0001-01-01 UTC, which is older than any horizon.
func occurredIn(t time.Time) time.Time {
	return t.Truncate(time.Microsecond).UTC()
}

// LockVersion is LockVersions of entity alone.
func (s *Store[TTx]) LockVersion(ctx context.Context, tx TTx, consumer, entity string) (int64, bool, error) {
	vs, err := s.LockVersions(ctx, tx, consumer, []string{entity})
	if err != nil {
		return 0, false, err
	}
	v, ok := vs[entity]
	return v, ok, nil
}

// SetVersion is SetVersions of entity alone.
func (s *Store[TTx]) SetVersion(ctx context.Context, tx TTx, consumer, entity string, version int64) error {
	return s.SetVersions(ctx, tx, consumer, map[string]int64{entity: version})
}

// PruneInbox raises the consumer's horizon to before (never lowers it) in one autocommit
// statement, then deletes up to limit of its records that occurred before the horizon in a
// second one. It waits for no inbox transaction: those that read the old horizon are safe
// because a deleted record's key can be inserted again only after the deletion committed, and
// their Horizon read comes after that insert (see driver.InboxStore).
//
// On a partitioned inbox (Options.InboxPartitioning) it deletes no record: after the raise it
// drops the partitions whose records all occurred before their consumers' horizons
// (dropInboxPartitions), whatever limit, and returns how many records of consumer they held.
func (s *Store[TTx]) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	var h time.Time
	if err := queryRow(ctx, s.db, s.q.raiseHorizon, raiseHorizonParams{Consumer: consumer, Before: occurredIn(before)}.args(), &h); err != nil {
		return 0, fmt.Errorf("postgres: prune inbox: raise horizon: %w", classify(err))
	}
	if r, ok := s.inboxRanges(); ok {
		n, err := s.dropInboxPartitions(ctx, s.db, r, consumer, s.withTx)
		if err != nil {
			return int(n), fmt.Errorf("postgres: prune inbox: %w", classify(err))
		}
		return int(n), nil
	}
	n, err := s.db.exec(ctx, s.q.pruneInbox, pruneInboxParams{Consumer: consumer, Horizon: h, Limit: driver.PruneLimit(limit)}.args()...)
	if err != nil {
		return 0, fmt.Errorf("postgres: prune inbox: %w", classify(err))
	}
	return int(n), nil
}

// InboxPartitioned implements driver.PartitionedInbox: whether the inbox is partitioned
// (Options.InboxPartitioning), so that PruneInbox removes records a whole partition at a time.
func (s *Store[TTx]) InboxPartitioned() bool { return s.o.InboxPartitioning != nil }

// dropInboxPartitions is the deletion of PruneInbox on the partitioned inbox r, after the raise
// of consumer's horizon: dropSealed of every partition all of whose records occurred before
// their consumers' horizons (InboxPartitionCheck: what PruneInbox of each consumer would
// delete), under the inbox's lock, counting the records of consumer. A partition whose lock
// timed out (an inbox transaction lasted the whole timeout) is left for a later prune, so that
// no delivery in progress can make a prune fail. Records older than the horizon in a partition
// that is kept stay: Horizon refuses their messages all the same.
func (s *Store[TTx]) dropInboxPartitions(ctx context.Context, q querier, r ranges, consumer string, inTx func(context.Context, func(context.Context, querier) error) error) (int64, error) {
	return s.dropSealed(ctx, q, sealedDrop{r: r, check: s.q.inboxPartitionCheck, count: s.q.inboxPartitionCount,
		countArgs: inboxPartitionCountParams{Consumer: consumer}.args(), lock: s.q.inboxLockTable, skipBusy: true}, inTx)
}

// LockVersions implements driver.InboxBatchStore: the rows of entities locked FOR UPDATE in
// entity order, the missing ones created without a version first.
func (s *Store[TTx]) LockVersions(ctx context.Context, tx TTx, consumer string, entities []string) (map[string]int64, error) {
	q := s.txq(tx)
	out, n, err := s.lockVersions(ctx, q, consumer, entities)
	if err == nil && n < len(entities) {
		if _, err = q.exec(ctx, s.q.versionEnsureMany, versionLockManyParams{Consumer: consumer, Entities: entities}.args()...); err == nil {
			out, _, err = s.lockVersions(ctx, q, consumer, entities)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: lock versions: %w", classify(err))
	}
	return out, nil
}

// lockVersions locks the existing rows of entities; it returns the versions set and how many
// rows it locked.
func (s *Store[TTx]) lockVersions(ctx context.Context, q querier, consumer string, entities []string) (map[string]int64, int, error) {
	r, err := q.query(ctx, s.q.versionLockMany, versionLockManyParams{Consumer: consumer, Entities: entities}.args()...)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	out, n := make(map[string]int64, len(entities)), 0
	for r.Next() {
		var (
			e string
			v pgtype.Int8
		)
		if err := r.Scan(&e, &v); err != nil {
			return nil, 0, err
		}
		n++
		if v.Valid {
			out[e] = v.Int64
		}
	}
	return out, n, r.Err()
}

// InsertRecords implements driver.InboxBatchStore: one INSERT ... ON CONFLICT DO NOTHING for
// every record (a concurrent transaction inserting one of the keys makes it wait on the unique
// index), then one read of the records that existed (a new snapshot, read committed). A record
// gone by the time it is read (a concurrent prune deleted it) is inserted again: its key is
// free now, and the inbox's horizon check after the insert refuses a message older than the
// horizon the prune raised.
//
// On a partitioned inbox (Options.InboxPartitioning) it locks the keys first (InboxLockKeys),
// then reads the records that exist in any partition, then inserts the others: see
// insertPartitioned.
func (s *Store[TTx]) InsertRecords(ctx context.Context, tx TTx, recs []driver.InboxRecord) ([]driver.InboxRecord, []bool, error) {
	q := s.txq(tx)
	existing, inserted := make([]driver.InboxRecord, len(recs)), make([]bool, len(recs))
	if len(recs) == 0 {
		return existing, inserted, nil
	}
	if s.o.InboxPartitioning != nil {
		if err := s.insertPartitioned(ctx, q, recs, existing, inserted); err != nil {
			return nil, nil, fmt.Errorf("postgres: insert inbox records: %w", classify(err))
		}
		return existing, inserted, nil
	}
	consumer, source := recs[0].Consumer, recs[0].Source
	todo := make([]int, len(recs))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 1; len(todo) > 0; attempt++ {
		tenants, ids, digests, positions := make([]string, len(todo)), make([]string, len(todo)), make([][]byte, len(todo)), make([]string, len(todo))
		outcomes, occurred := make([]int16, len(todo)), make([]time.Time, len(todo))
		for k, i := range todo {
			tenants[k], ids[k], digests[k], positions[k] = recs[i].Tenant, recs[i].EventID, recs[i].Digest[:], recs[i].SourcePosition
			outcomes[k], occurred[k] = int16(recs[i].Outcome), occurredIn(recs[i].OccurredAt)
		}
		got, err := s.insertMany(ctx, q, inboxInsertManyParams{Consumer: consumer, Source: source, Tenants: tenants,
			EventIDs: ids, Digests: digests, Positions: positions, Outcomes: outcomes, Occurred: occurred})
		if err != nil {
			return nil, nil, fmt.Errorf("postgres: insert inbox records: %w", classify(err))
		}
		var otherTenants, others []string
		for k, i := range todo {
			if got[recordKey{tenants[k], ids[k]}] {
				inserted[i] = true
			} else {
				otherTenants, others = append(otherTenants, tenants[k]), append(others, ids[k])
			}
		}
		if len(others) == 0 {
			break
		}
		found := map[recordKey]driver.InboxRecord{}
		r, err := q.query(ctx, s.q.inboxGetMany, inboxGetManyParams{Consumer: consumer, Source: source, Tenants: otherTenants, EventIDs: others}.args()...)
		if err == nil {
			err = scanInbox(r, consumer, func(rec driver.InboxRecord) { found[recordKey{rec.Tenant, rec.EventID}] = rec })
		}
		if err != nil {
			return nil, nil, fmt.Errorf("postgres: read inbox records: %w", classify(err))
		}
		next := todo[:0]
		for _, i := range todo {
			if inserted[i] {
				continue
			}
			if ex, ok := found[recordKey{recs[i].Tenant, recs[i].EventID}]; ok {
				existing[i] = ex
			} else {
				next = append(next, i) // pruned between the insert and the read
			}
		}
		todo = next
		if len(todo) > 0 && attempt == 3 {
			return nil, nil, fmt.Errorf("postgres: read inbox records: %d records pruned between their insert and their read three times", len(todo))
		}
	}
	return existing, inserted, nil
}

// insertPartitioned is InsertRecords on a partitioned inbox, whose primary key holds
// processed_at (a unique index of a partitioned table must hold its partition key), so that
// the index alone would let a key be recorded again in a later partition. It takes a
// transaction-level advisory lock on the hash of every key (sorted: one lock order for every
// batch; two keys of one hash share a lock, which costs only a wait), so that a concurrent
// transaction with one of the keys waits for this one to end, as on the plain inbox's unique
// index; then reads the records of the keys in every partition, and inserts those it did not
// find into the current partition. A partition dropped by PruneInbox meanwhile (it waits for
// this transaction's table lock, or this transaction for its drop) held only records older
// than their consumers' horizons, raised before the drop: Horizon refuses their messages.
func (s *Store[TTx]) insertPartitioned(ctx context.Context, q querier, recs []driver.InboxRecord, existing []driver.InboxRecord, inserted []bool) error {
	consumer, source := recs[0].Consumer, recs[0].Source
	hashes := make([]int32, len(recs))
	tenants, ids := make([]string, len(recs)), make([]string, len(recs))
	for i, r := range recs {
		h := fnv.New32a()
		for _, part := range []string{consumer, source, r.Tenant, r.EventID} {
			h.Write([]byte(part))
			h.Write([]byte{0})
		}
		hashes[i] = int32(h.Sum32())
		tenants[i], ids[i] = r.Tenant, r.EventID
	}
	slices.Sort(hashes)
	if _, err := q.exec(ctx, s.q.inboxLockKeys, inboxLockKeysParams{Class: s.n.inboxKey, Keys: slices.Compact(hashes)}.args()...); err != nil {
		return err
	}
	found := map[recordKey]driver.InboxRecord{}
	r, err := q.query(ctx, s.q.inboxGetMany, inboxGetManyParams{Consumer: consumer, Source: source, Tenants: tenants, EventIDs: ids}.args()...)
	if err == nil {
		err = scanInbox(r, consumer, func(rec driver.InboxRecord) { found[recordKey{rec.Tenant, rec.EventID}] = rec })
	}
	if err != nil {
		return err
	}
	var p inboxInsertPartitionedParams
	p.Consumer, p.Source = consumer, source
	for i, rec := range recs {
		if ex, ok := found[recordKey{rec.Tenant, rec.EventID}]; ok {
			existing[i] = ex
			continue
		}
		inserted[i] = true
		p.Tenants, p.EventIDs, p.Digests = append(p.Tenants, rec.Tenant), append(p.EventIDs, rec.EventID), append(p.Digests, rec.Digest[:])
		p.Positions, p.Outcomes, p.Occurred = append(p.Positions, rec.SourcePosition), append(p.Outcomes, int16(rec.Outcome)), append(p.Occurred, occurredIn(rec.OccurredAt))
	}
	if len(p.EventIDs) == 0 {
		return nil
	}
	_, err = q.exec(ctx, s.q.inboxInsertPartitioned, p.args()...)
	return err
}

// recordKey is an inbox record's key within one consumer and source.
type recordKey struct{ tenant, eventID string }

// insertMany runs InboxInsertMany and returns the keys it inserted.
func (s *Store[TTx]) insertMany(ctx context.Context, q querier, p inboxInsertManyParams) (map[recordKey]bool, error) {
	r, err := q.query(ctx, s.q.inboxInsertMany, p.args()...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	got := make(map[recordKey]bool, len(p.EventIDs))
	for r.Next() {
		var k recordKey
		if err := r.Scan(&k.tenant, &k.eventID); err != nil {
			return nil, err
		}
		got[k] = true
	}
	return got, r.Err()
}

// scanInbox hands each inbox record of r (InboxGetMany's or InboxGetByID's columns) to each,
// and closes r.
func scanInbox(r rows, consumer string, each func(driver.InboxRecord)) error {
	defer r.Close()
	for r.Next() {
		var (
			digest              []byte
			outcome             int64
			occurred, processed time.Time
		)
		ex := driver.InboxRecord{Consumer: consumer}
		if err := r.Scan(&ex.Source, &ex.Tenant, &ex.EventID, &digest, &ex.SourcePosition, &outcome, &occurred, &processed); err != nil {
			return err
		}
		if len(digest) != len(ex.Digest) {
			return fmt.Errorf("digest of %d bytes", len(digest))
		}
		copy(ex.Digest[:], digest)
		ex.Outcome = core.Outcome(outcome)
		ex.OccurredAt, ex.ProcessedAt = occurred.UTC(), processed.UTC()
		each(ex)
	}
	return r.Err()
}

// SetVersions implements driver.InboxBatchStore: one upsert for every entity.
func (s *Store[TTx]) SetVersions(ctx context.Context, tx TTx, consumer string, versions map[string]int64) error {
	entities := slices.Sorted(maps.Keys(versions))
	vs := make([]int64, len(entities))
	for i, e := range entities {
		vs[i] = versions[e]
	}
	if _, err := s.txq(tx).exec(ctx, s.q.versionSetMany, versionSetManyParams{Consumer: consumer, Entities: entities, Versions: vs}.args()...); err != nil {
		return fmt.Errorf("postgres: set versions: %w", classify(err))
	}
	return nil
}
