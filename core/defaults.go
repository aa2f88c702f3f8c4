package core

import "time"

// Defaults of the options of this package: a zero field takes its default. The daemon's help
// (outboxkit relay --help) prints these values, so they are stated in one place.
const (
	// DefaultLeaseTTL is the default of RelayOptions.LeaseTTL and CDCOptions.LeaseTTL; their
	// RenewInterval defaults to a third of it.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultPollInterval is the default of RelayOptions.PollInterval.
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultBreakerThreshold and DefaultBreakerMaxDelay are the defaults of
	// RelayOptions.BreakerThreshold and RelayOptions.BreakerMaxDelay.
	DefaultBreakerThreshold = 5
	DefaultBreakerMaxDelay  = 30 * time.Second
	// DefaultRetryInitial, DefaultRetryMax, DefaultRetryMultiplier, DefaultRetryJitter and
	// DefaultRetryDeadline are the defaults of RetryPolicy's fields.
	DefaultRetryInitial    = time.Second
	DefaultRetryMax        = 5 * time.Minute
	DefaultRetryMultiplier = 2.0
	DefaultRetryJitter     = 0.2
	DefaultRetryDeadline   = 24 * time.Hour
	// DefaultRetentionInterval and DefaultCheckpointInterval are the defaults of
	// CDCOptions.RetentionInterval and CDCOptions.CheckpointInterval.
	DefaultRetentionInterval  = 30 * time.Second
	DefaultCheckpointInterval = 10 * time.Second
	// DefaultCleanupRetention is the default of CleanupOptions.Retention.
	DefaultCleanupRetention = 24 * time.Hour
)
