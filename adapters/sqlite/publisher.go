package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// AcquireGeneration implements driver.RelayStore. It reads the publisher row and, unless p.Join
// applies, increments its generation, in one transaction holding SQLite's write lock: two
// concurrent calls (from this Store, another Store or another process) get distinct
// generations, and none runs between a ClaimLanes or RenewLanes fence check and its lease
// changes.
func (s *Store) AcquireGeneration(ctx context.Context, p driver.AcquireParams) (driver.Publisher, error) {
	if err := p.CheckKind(); err != nil {
		return driver.Publisher{}, err
	}
	var out driver.Publisher
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		cur, err := readPublisher(s.queryRow(ctx, tx, s.q.publisherGet))
		if err != nil {
			return err
		}
		if p.Join && cur.Kind == p.Kind {
			out = cur
			return nil
		}
		out, err = readPublisher(s.queryRow(ctx, tx, s.q.publisherBump, publisherBumpParams{Kind: p.Kind, Holder: p.Holder, Since: nowMicros(p.Now)}.args()...))
		return err
	})
	if err != nil {
		return driver.Publisher{}, fmt.Errorf("sqlite: acquire generation: %w", classify(err))
	}
	return out, nil
}

// Generation implements driver.RelayStore.
func (s *Store) Generation(ctx context.Context) (driver.Publisher, error) {
	pub, err := s.generation(ctx)
	if err != nil {
		return driver.Publisher{}, fmt.Errorf("sqlite: generation: %w", classify(err))
	}
	return pub, nil
}

// generation reads the publisher row outside any transaction.
func (s *Store) generation(ctx context.Context) (driver.Publisher, error) {
	rows, err := s.dbQuery(ctx, s.q.publisherGet)
	if err != nil {
		return driver.Publisher{}, publisherError(err)
	}
	defer rows.Close()
	if !rows.Next() {
		err := rows.Err()
		if err == nil {
			err = sql.ErrNoRows
		}
		return driver.Publisher{}, publisherError(err)
	}
	pub, err := readPublisher(rows)
	if err != nil {
		return driver.Publisher{}, err
	}
	return pub, rows.Close()
}

// checkGeneration returns an error wrapping core.ErrFenced unless gen is the outbox's current
// publisher generation. Called inside a write transaction, the answer holds until it ends:
// AcquireGeneration needs the same write lock.
func (s *Store) checkGeneration(ctx context.Context, tx *sql.Tx, gen int64) error {
	cur, err := readPublisher(s.queryRow(ctx, tx, s.q.publisherGet))
	if err != nil {
		return err
	}
	return fenced(gen, cur)
}

// fencedNoWork is the fence check of a ClaimLanes or RenewLanes call that has nothing to
// change: a plain read, no write lock.
func (s *Store) fencedNoWork(ctx context.Context, gen int64) error {
	cur, err := s.generation(ctx)
	if err != nil {
		return err
	}
	return fenced(gen, cur)
}

// fenced returns an error wrapping core.ErrFenced unless gen is cur's generation.
func fenced(gen int64, cur driver.Publisher) error {
	if cur.Generation == gen {
		return nil
	}
	return fmt.Errorf("generation %d, current %d (kind %q, holder %q): %w", gen, cur.Generation, cur.Kind, cur.Holder, core.ErrFenced)
}

// readPublisher scans the publisher row from a *sql.Row or *sql.Rows.
func readPublisher(row interface{ Scan(...any) error }) (driver.Publisher, error) {
	var (
		p     driver.Publisher
		since sql.NullInt64
	)
	if err := row.Scan(&p.Generation, &p.Kind, &p.Holder, &since); err != nil {
		return driver.Publisher{}, publisherError(err)
	}
	p.Since = fromNullMicros(since)
	return p, nil
}

// publisherError turns a missing publisher table or row (a database migrated by an older
// version of this adapter, not yet by this one) into core.ErrSchemaMismatch.
func publisherError(err error) error {
	if errors.Is(err, sql.ErrNoRows) || isNoSuchTable(err) {
		if isNoSuchTable(err) {
			return &core.NotMigratedError{Err: err}
		}
		return &core.NotMigratedError{Missing: "the publisher row"}
	}
	return err
}
