package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// AcquireGeneration makes the caller the outbox's publisher. In one transaction it locks the
// publisher row (FOR UPDATE) and, unless p.Join applies (p.Join and the current kind is
// p.Kind: the current generation is returned unchanged), increments the generation and records
// p.Kind, p.Holder and now (p.Now, else the database clock) as Since. Claims, renewals and
// checkpoint saves of the older generations, which lock the same row FOR SHARE, fail with
// core.ErrFenced from then on.
func (s *Store[TTx]) AcquireGeneration(ctx context.Context, p driver.AcquireParams) (driver.Publisher, error) {
	if err := p.CheckKind(); err != nil {
		return driver.Publisher{}, err
	}
	var pub driver.Publisher
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		cur, err := scanPublisher(ctx, q, s.q.publisherLock)
		if err != nil {
			return err
		}
		if p.Join && cur.Kind == p.Kind {
			pub = cur
			return nil
		}
		pub, err = scanPublisher(ctx, q, s.q.publisherBump, publisherBumpParams{Kind: p.Kind, Holder: p.Holder, Now: tsIn(p.Now)}.args()...)
		return err
	})
	if err != nil {
		return driver.Publisher{}, fmt.Errorf("postgres: acquire generation: %w", classify(err))
	}
	return pub, nil
}

// Generation returns the outbox's current publisher generation.
func (s *Store[TTx]) Generation(ctx context.Context) (driver.Publisher, error) {
	pub, err := scanPublisher(ctx, s.db, s.q.publisherGet)
	if err != nil {
		return driver.Publisher{}, fmt.Errorf("postgres: generation: %w", classify(err))
	}
	return pub, nil
}

func scanPublisher(ctx context.Context, q querier, sql string, args ...any) (driver.Publisher, error) {
	var p driver.Publisher
	var since pgtype.Timestamptz
	err := queryRow(ctx, q, sql, args, &p.Generation, &p.Kind, &p.Holder, &since)
	if errors.Is(err, errNoRows) {
		return driver.Publisher{}, &core.NotMigratedError{Missing: "the publisher row"}
	}
	if err != nil {
		return driver.Publisher{}, err
	}
	p.Since = tsOut(since)
	return p, nil
}

// LoadCheckpoint returns the CDC checkpoint; ok is false when none was ever saved. It
// implements driver.CheckpointStore.
func (s *Store[TTx]) LoadCheckpoint(ctx context.Context) (driver.Checkpoint, bool, error) {
	var c driver.Checkpoint
	err := queryRow(ctx, s.db, s.q.checkpointGet, nil, &c.Source, &c.Position, &c.Generation, &c.UpdatedAt)
	if errors.Is(err, errNoRows) {
		return driver.Checkpoint{}, false, nil
	}
	if err != nil {
		return driver.Checkpoint{}, false, fmt.Errorf("postgres: load checkpoint: %w", classify(err))
	}
	c.UpdatedAt = c.UpdatedAt.UTC()
	return c, true, nil
}

// SaveCheckpoint replaces the CDC checkpoint (UpdatedAt is the database clock). One statement
// that locks the publisher row FOR SHARE and writes only when c.Generation is the current
// publisher generation; otherwise it changes nothing and returns an error wrapping
// core.ErrFenced. It implements driver.CheckpointStore.
func (s *Store[TTx]) SaveCheckpoint(ctx context.Context, c driver.Checkpoint) error {
	var current, written int64
	err := queryRow(ctx, s.db, s.q.checkpointPut, checkpointPutParams{Source: c.Source, Position: c.Position, Generation: c.Generation}.args(), &current, &written)
	if errors.Is(err, errNoRows) {
		return fmt.Errorf("postgres: save checkpoint: %w", &core.NotMigratedError{Missing: "the publisher row"})
	}
	if err != nil {
		return fmt.Errorf("postgres: save checkpoint: %w", classify(err))
	}
	if current != c.Generation || written != 1 {
		return fmt.Errorf("postgres: save checkpoint: %w: generation %d, current %d", core.ErrFenced, c.Generation, current)
	}
	return nil
}
