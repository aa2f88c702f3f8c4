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
// partitions after it, unless they exist. Migrate, MigrateInbox, DropPartitions (hence
// core.CleanupOutbox) and the partitioned inbox's PruneInbox call it; run one of them at least
// once every Ahead intervals, or inserts fail once time passes the last partition. Creating a
// partition briefly locks its table exclusively (once per interval). It does nothing when no
// table is partitioned.
func (s *Store[TTx]) EnsurePartitions(ctx context.Context) error {
	if s.o.Partitioning == nil && s.o.InboxPartitioning == nil {
		return nil
	}
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		if _, err := q.exec(ctx, s.q.migrateLock, migrateLockParams{Key: s.n.migrateKey}.args()...); err != nil {
			return err
		}
		for _, r := range s.partitioned() {
			if err := s.ensurePartitions(ctx, q, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: ensure partitions: %w", classify(err))
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

// partitionSQL returns the check and count statements given and the drop statement, each for
// partition part.
func (s *Store[TTx]) partitionSQL(part partition, check, count string) (string, string, string, error) {
	id := sqlfile.Idents{"partition": part.qualified(s.n.schema)}
	var out [3]string
	for i, sql := range []string{check, count, s.q.partitionDrop} {
		var err error
		if out[i], err = id.Expand(sql); err != nil {
			return "", "", "", err
		}
	}
	return out[0], out[1], out[2], nil
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
	parts, err := s.listPartitions(ctx, s.db, r)
	if err != nil {
		return 0, fmt.Errorf("postgres: drop partitions: %w", classify(err))
	}
	var now time.Time
	if err := queryRow(ctx, s.db, s.q.now, nil, &now); err != nil {
		return 0, fmt.Errorf("postgres: drop partitions: %w", classify(err))
	}
	below := p.BelowSeq
	if below <= 0 {
		below = math.MaxInt64
	}
	cut := occurredIn(p.PublishedBefore)
	total := 0
	for _, part := range parts {
		if part.hi.After(now) || part.hi.After(p.PublishedBefore) {
			break // partitions are sorted by lower bound: the rest are not sealed either
		}
		check, count, drop, err := s.partitionSQL(part, s.q.partitionCheck, s.q.partitionCount)
		if err != nil {
			return total, err
		}
		var ok bool
		if err := queryRow(ctx, s.db, check, partitionCheckParams{Before: cut, Below: below}.args(), &ok); err != nil {
			return total, fmt.Errorf("postgres: drop partitions: check %s: %w", part.name, err)
		}
		if !ok {
			continue
		}
		var rows int64
		if err := queryRow(ctx, s.db, count, nil, &rows); err != nil {
			return total, fmt.Errorf("postgres: drop partitions: count %s: %w", part.name, err)
		}
		dropped := false
		err = s.withTx(ctx, func(ctx context.Context, q querier) error {
			dropped = false
			if _, err := q.exec(ctx, s.q.partitionLockTimeout); err != nil {
				return err
			}
			if _, err := q.exec(ctx, s.q.partitionLockOutbox); err != nil {
				return err
			}
			var ok bool
			if err := queryRow(ctx, q, check, partitionCheckParams{Before: cut, Below: below}.args(), &ok); err != nil || !ok {
				return err
			}
			if _, err := q.exec(ctx, drop); err != nil {
				return err
			}
			if _, err := q.exec(ctx, s.q.partitionIDs, partitionIDsParams{From: part.lo, To: part.hi}.args()...); err != nil {
				return err
			}
			dropped = true
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("postgres: drop partitions: %s: %w", part.name, err)
		}
		if dropped {
			total += int(rows)
			s.log.Info("postgres_partition_dropped", "partition", part.name, "rows", rows)
		}
	}
	if err := s.EnsurePartitions(ctx); err != nil {
		return total, fmt.Errorf("postgres: drop partitions: %w", classify(err))
	}
	return total, nil
}
