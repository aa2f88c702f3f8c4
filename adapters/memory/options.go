package memory

import "log/slog"

// Options configures a Store. The zero value (or nil) is ready to use.
type Options struct {
	// Lanes is the lane count, as a migration would record it. Default core.DefaultLanes;
	// at most core.MaxLanes.
	Lanes int
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
}
