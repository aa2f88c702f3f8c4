package postgres

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/outboxkit/outbox/adapters/postgres/internal/bridge"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/sqlfile"
)

// partitionLayout is the time part of a partition name: its lower bound, UTC, to the hour.
const partitionLayout = bridge.PartitionLayout

// partition is one time range of a partitioned table.
type partition struct {
	name   string // bare
	parent string // the partitioned table, qualified
	lo, hi time.Time
}

// ranges is a table partitioned by time: the outbox (by created_at) or the inbox (by
// processed_at).
type ranges struct {
	parent string // qualified
	raw    string // bare: partitions are raw+"_p"+partitionLayout
	Partitioning
}

// outboxRanges and inboxRanges are the store's partitioned tables; ok is false when the table
// is not partitioned.
func (s *Store[TTx]) outboxRanges() (ranges, bool) {
	if s.o.Partitioning == nil {
		return ranges{}, false
	}
	return ranges{parent: s.n.outbox, raw: s.n.rawTable, Partitioning: *s.o.Partitioning}, true
}

func (s *Store[TTx]) inboxRanges() (ranges, bool) {
	if s.o.InboxPartitioning == nil {
		return ranges{}, false
	}
	return ranges{parent: s.n.inbox, raw: s.n.rawInbox, Partitioning: *s.o.InboxPartitioning}, true
}

func (r ranges) named(name string) (partition, bool) {
	rest, ok := strings.CutPrefix(name, r.raw+"_p")
	if !ok || len(rest) != len(partitionLayout) {
		return partition{}, false
	}
	lo, err := time.ParseInLocation(partitionLayout, rest, time.UTC)
	if err != nil {
		return partition{}, false
	}
	return partition{name: name, parent: r.parent, lo: lo, hi: lo.Add(r.Interval)}, true
}

// at returns the partition that holds time t.
func (r ranges) at(t time.Time) partition {
	lo := time.Unix(0, 0).UTC().Add(t.UTC().Sub(time.Unix(0, 0)).Truncate(r.Interval))
	if lo.After(t) {
		lo = lo.Add(-r.Interval)
	}
	return partition{name: r.raw + "_p" + lo.Format(partitionLayout), parent: r.parent, lo: lo, hi: lo.Add(r.Interval)}
}

// partitionAt is the outbox's partition that holds t (the outbox must be partitioned).
func (s *Store[TTx]) partitionAt(t time.Time) partition {
	r, _ := s.outboxRanges()
	return r.at(t)
}

func (p partition) qualified(schema string) string { return schema + "." + quote(p.name) }

func tsLiteral(t time.Time) string { return "'" + t.UTC().Format("2006-01-02 15:04:05") + "+00'" }

// EnsurePartitions creates, for each partitioned table (Options.Partitioning,
// Options.InboxPartitioning), the partition holding the database's current time and the Ahead
// partitions after it, unless they exist. Migrate does it for both tables, MigrateInbox and the
// partitioned inbox's PruneInbox (hence Inbox.Prune) for the inbox, DropPartitions (hence
// core.CleanupOutbox) for the outbox; run one of them for each table at least once every Ahead
// intervals, or inserts fail once time passes its last partition. Creating a
// partition briefly locks its table exclusively (once per interval). It does nothing when no
// table is partitioned.
func (s *Store[TTx]) EnsurePartitions(ctx context.Context) error {
	parts := s.partitioned()
	if len(parts) == 0 {
		return nil
	}
	if err := s.withTx(ctx, func(ctx context.Context, q querier) error { return s.ensureLocked(ctx, q, parts...) }); err != nil {
		return fmt.Errorf("postgres: ensure partitions: %w", classify(err))
	}
	return nil
}

// ensureLocked takes Migrate's lock in q's transaction and creates the partitions ahead of each
// of parts.
func (s *Store[TTx]) ensureLocked(ctx context.Context, q querier, parts ...ranges) error {
	if _, err := q.exec(ctx, s.q.migrateLock, migrateLockParams{Key: s.n.migrateKey}.args()...); err != nil {
		return err
	}
	for _, r := range parts {
		if err := s.ensurePartitions(ctx, q, r); err != nil {
			return err
		}
	}
	return nil
}

// partitioned returns the store's partitioned tables.
func (s *Store[TTx]) partitioned() []ranges {
	var out []ranges
	if r, ok := s.outboxRanges(); ok {
		out = append(out, r)
	}
	if r, ok := s.inboxRanges(); ok {
		out = append(out, r)
	}
	return out
}

// ensurePartitions runs in a transaction that holds the migration lock.
func (s *Store[TTx]) ensurePartitions(ctx context.Context, q querier, r ranges) error {
	existing, err := s.listPartitions(ctx, q, r)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, p := range existing {
		have[p.name] = true
	}
	var now time.Time
	if err := queryRow(ctx, q, s.q.now, nil, &now); err != nil {
		return err
	}
	p := r.at(now)
	for range r.Ahead + 1 {
		if !have[p.name] {
			if err := s.createPartition(ctx, q, p); err != nil {
				return err
			}
		}
		p = r.at(p.hi)
	}
	return nil
}

// createPartition creates partition p of its table.
func (s *Store[TTx]) createPartition(ctx context.Context, q querier, p partition) error {
	sql, err := sqlfile.Idents{"partition": p.qualified(s.n.schema), "parent": p.parent, "from": tsLiteral(p.lo), "to": tsLiteral(p.hi)}.Expand(s.q.createPartition)
	if err != nil {
		return err
	}
	if _, err := q.exec(ctx, sql); err != nil {
		return fmt.Errorf("create partition %s: %w", p.name, err)
	}
	return nil
}

// listPartitions returns r's partitions by lower bound.
func (s *Store[TTx]) listPartitions(ctx context.Context, q querier, r ranges) ([]partition, error) {
	rs, err := q.query(ctx, s.q.partitions, partitionsParams{Parent: r.parent}.args()...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []partition
	for rs.Next() {
		var name string
		if err := rs.Scan(&name); err != nil {
			return nil, err
		}
		if p, ok := r.named(name); ok {
			out = append(out, p)
		}
	}
	rs.Close()
	return out, rs.Err()
}

// DropPartitions implements driver.PartitionPruner (core.CleanupOutbox calls it before
// PruneOutbox). On a partitioned outbox it drops, oldest first, every partition that is sealed
// (its range ends before both the database's current time and p.PublishedBefore, so no new
// transaction can insert into it) and holds only rows PruneOutbox would delete: none
// unpublished, all published before p.PublishedBefore, every seq below p.BelowSeq (when > 0)
// and below the lowest unpublished seq. The IDs of its events leave the side table. It returns
// how many rows the dropped partitions held. p.Limit does not apply. It then creates partitions
// ahead (EnsurePartitions). On a plain outbox it does nothing.
//
// Each partition is checked twice: first without a lock (and counted), then again, with index
// lookups only, while holding an ACCESS EXCLUSIVE lock on the outbox (taken with a 5 s lock
// timeout): writers and relays wait for that check and the drop, and the lock first waits for
// every transaction that wrote the outbox, so a late insert into the partition is either seen
// by the check or fails for want of a partition; never silently dropped.
func (s *Store[TTx]) DropPartitions(ctx context.Context, p driver.PruneParams) (int, error) {
	r, ok := s.outboxRanges()
	if !ok {
		return 0, nil
	}
	below := p.BelowSeq
	if below <= 0 {
		below = math.MaxInt64
	}
	args := partitionCheckParams{Before: occurredIn(p.PublishedBefore), Below: below}.args()
	n, err := s.dropSealed(ctx, s.db, sealedDrop{r: r, until: p.PublishedBefore, check: s.q.partitionCheck, checkArgs: args,
		count: s.q.partitionCount, lock: s.q.partitionLockOutbox,
		afterDrop: func(ctx context.Context, q querier, part partition) error {
			_, err := q.exec(ctx, s.q.partitionIDs, partitionIDsParams{From: part.lo, To: part.hi}.args()...)
			return err
		}}, s.withTx)
	if err != nil {
		return int(n), fmt.Errorf("postgres: drop partitions: %w", classify(err))
	}
	return int(n), nil
}

// sealedDrop is what dropSealed needs to know of one partitioned table.
type sealedDrop struct {
	r     ranges
	until time.Time // zero, or only partitions that end by then
	// check (with checkArgs) tells whether a partition ({{partition}}) holds only rows that
	// may go, with index lookups only; count (with countArgs) counts the rows reported.
	check, count         string
	checkArgs, countArgs []any
	lock                 string // locks the partitioned table in ACCESS EXCLUSIVE mode
	// afterDrop, when set, runs in the dropping transaction after the drop.
	afterDrop func(ctx context.Context, q querier, part partition) error
	// skipBusy leaves a partition whose lock timed out for a later call instead of failing.
	skipBusy bool
}

// dropSealed drops, oldest first, every sealed partition of d.r (its range ends by the
// database's current time, and by d.until when set, so no new transaction writes to it) whose
// check holds, and returns the rows count found in the dropped ones. Each partition is checked
// and counted in q without a lock, then, in a transaction of inTx, checked again while holding
// d.lock (taken with a 5 s lock timeout: it waits for every transaction that wrote the table,
// so a late row is either seen by the check or fails for want of a partition; writers wait for
// the drop), and dropped. Then, in another transaction of inTx, it creates partitions ahead.
func (s *Store[TTx]) dropSealed(ctx context.Context, q querier, d sealedDrop, inTx func(context.Context, func(context.Context, querier) error) error) (int64, error) {
	parts, err := s.listPartitions(ctx, q, d.r)
	if err != nil {
		return 0, err
	}
	var now time.Time
	if err := queryRow(ctx, q, s.q.now, nil, &now); err != nil {
		return 0, err
	}
	var total int64
	for _, part := range parts {
		if part.hi.After(now) || (!d.until.IsZero() && part.hi.After(d.until)) {
			break // partitions are sorted by lower bound: the rest are not sealed either
		}
		id := sqlfile.Idents{"partition": part.qualified(s.n.schema)}
		check, err := id.Expand(d.check)
		if err != nil {
			return total, err
		}
		count, err := id.Expand(d.count)
		if err != nil {
			return total, err
		}
		drop, err := id.Expand(s.q.partitionDrop)
		if err != nil {
			return total, err
		}
		var ok bool
		if err := queryRow(ctx, q, check, d.checkArgs, &ok); err != nil {
			return total, fmt.Errorf("check %s: %w", part.name, err)
		}
		if !ok {
			continue
		}
		var rows int64
		if err := queryRow(ctx, q, count, d.countArgs, &rows); err != nil {
			return total, fmt.Errorf("count %s: %w", part.name, err)
		}
		dropped := false
		err = inTx(ctx, func(ctx context.Context, q querier) error {
			dropped = false
			if _, err := q.exec(ctx, s.q.partitionLockTimeout); err != nil {
				return err
			}
			if _, err := q.exec(ctx, d.lock); err != nil {
				return err
			}
			var ok bool
			if err := queryRow(ctx, q, check, d.checkArgs, &ok); err != nil || !ok {
				return err
			}
			if _, err := q.exec(ctx, drop); err != nil {
				return err
			}
			if d.afterDrop != nil {
				if err := d.afterDrop(ctx, q, part); err != nil {
					return err
				}
			}
			dropped = true
			return nil
		})
		if pg := pgError(err); d.skipBusy && pg != nil && pg.Code == "55P03" { // lock_not_available: the lock timeout
			s.log.Info("postgres_partition_busy", "partition", part.name,
				"reason", "a transaction held the table for the whole lock timeout; a later prune drops it")
			continue
		}
		if err != nil {
			return total, fmt.Errorf("drop %s: %w", part.name, err)
		}
		if dropped {
			total += rows
			s.log.Info("postgres_partition_dropped", "partition", part.name, "rows", rows)
		}
	}
	if err := inTx(ctx, func(ctx context.Context, q querier) error { return s.ensureLocked(ctx, q, d.r) }); err != nil {
		return total, fmt.Errorf("ensure partitions: %w", err)
	}
	return total, nil
}
