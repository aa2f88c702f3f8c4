package memory

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// AcquireGeneration implements driver.RelayStore.
func (s *Store) AcquireGeneration(ctx context.Context, p driver.AcquireParams) (driver.Publisher, error) {
	if err := ctx.Err(); err != nil {
		return driver.Publisher{}, fmt.Errorf("memory: acquire generation: %w", err)
	}
	if err := p.CheckKind(); err != nil {
		return driver.Publisher{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Join && s.publisher.Kind == p.Kind {
		return s.publisher, nil
	}
	s.publisher = driver.Publisher{Generation: s.publisher.Generation + 1, Kind: p.Kind, Holder: p.Holder, Since: clock(p.Now)}
	return s.publisher, nil
}

// Generation implements driver.RelayStore.
func (s *Store) Generation(ctx context.Context) (driver.Publisher, error) {
	if err := ctx.Err(); err != nil {
		return driver.Publisher{}, fmt.Errorf("memory: generation: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.publisher, nil
}

// fenced returns an error wrapping core.ErrFenced unless gen is the current generation.
// s.mu must be held.
func (s *Store) fenced(what string, gen int64) error {
	if gen != s.publisher.Generation {
		return fmt.Errorf("memory: %s: generation %d, current %d: %w", what, gen, s.publisher.Generation, core.ErrFenced)
	}
	return nil
}
