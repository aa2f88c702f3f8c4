package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The publisher generation (driver.RelayStore.AcquireGeneration) is one row of Table+"_pub". Its
// writer (AcquireGeneration) locks it exclusively; ClaimLanes, RenewLanes and SaveCheckpoint
// read it with a shared lock in their own transaction, so that a call of an older generation
// either commits before the new generation exists or sees it and changes nothing.

// AcquireGeneration implements driver.RelayStore.
func (s *Store) AcquireGeneration(ctx context.Context, p driver.AcquireParams) (driver.Publisher, error) {
	if err := p.CheckKind(); err != nil {
		return driver.Publisher{}, err
	}
	var pub driver.Publisher
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		cur, err := scanPublisher(tx.QueryRowContext(ctx, s.q.publisherLockX))
		if err != nil {
			return err
		}
		if p.Join && cur.Kind == p.Kind {
			pub = cur
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.q.publisherBump, publisherBumpParams{Kind: p.Kind, Holder: p.Holder, Now: timeArg(p.Now)}.args()...); err != nil {
			return err
		}
		pub, err = scanPublisher(tx.QueryRowContext(ctx, s.q.publisherRead))
		return err
	})
	if err != nil {
		return driver.Publisher{}, s.publisherErr("acquire generation", err)
	}
	return pub, nil
}

// Generation implements driver.RelayStore.
func (s *Store) Generation(ctx context.Context) (driver.Publisher, error) {
	pub, err := scanPublisher(s.db.QueryRowContext(ctx, s.q.publisherRead))
	if err != nil {
		return driver.Publisher{}, s.publisherErr("generation", err)
	}
	return pub, nil
}

func (s *Store) publisherErr(op string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("mysql: %s: %w", op, s.notMigrated("no publisher row"))
	}
	return wrap(op, err)
}

func scanPublisher(row *sql.Row) (driver.Publisher, error) {
	var p driver.Publisher
	var since sql.NullTime
	if err := row.Scan(&p.Generation, &p.Kind, &p.Holder, &since); err != nil {
		return driver.Publisher{}, err
	}
	p.Since = nullTime(since)
	return p, nil
}

// fencedError is returned inside a transaction whose caller's generation is not current.
type fencedError struct{ have, current int64 }

func (e *fencedError) Error() string {
	return fmt.Sprintf("%s (generation %d, current %d)", core.ErrFenced, e.have, e.current)
}

func (e *fencedError) Unwrap() error { return core.ErrFenced }

// checkGeneration locks the publisher row in share mode and returns a *fencedError unless
// generation is the current one.
func (s *Store) checkGeneration(ctx context.Context, tx *sql.Tx, generation int64) error {
	var cur int64
	if err := tx.QueryRowContext(ctx, s.q.publisherLockS).Scan(&cur); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return s.notMigrated("no publisher row")
		}
		return err
	}
	if cur != generation {
		return &fencedError{have: generation, current: cur}
	}
	return nil
}

// LoadCheckpoint implements driver.CheckpointStore.
func (s *Store) LoadCheckpoint(ctx context.Context) (driver.Checkpoint, bool, error) {
	var c driver.Checkpoint
	err := s.db.QueryRowContext(ctx, s.q.checkpointRead).Scan(&c.Source, &c.Position, &c.Generation, &c.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Checkpoint{}, false, nil
	}
	if err != nil {
		return driver.Checkpoint{}, false, wrap("load checkpoint", err)
	}
	c.UpdatedAt = c.UpdatedAt.UTC()
	return c, true, nil
}

// SaveCheckpoint implements driver.CheckpointStore: in one transaction it checks c.Generation
// against the publisher row (shared lock) and replaces the checkpoint.
func (s *Store) SaveCheckpoint(ctx context.Context, c driver.Checkpoint) error {
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		if err := s.checkGeneration(ctx, tx, c.Generation); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q.checkpointPut, checkpointPutParams{Source: c.Source, Position: c.Position, Generation: c.Generation}.args()...)
		return err
	})
	return wrap("save checkpoint", err)
}
