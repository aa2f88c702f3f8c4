package driver

import (
	"context"
	"time"
)

// The interfaces in this file are what a database adapter implements for the change-data-capture
// relay (CDCRelay): a checkpoint table in the outbox's database, and a reader of the database's
// own change log (PostgreSQL logical replication, the MySQL/MariaDB binary log).

// Checkpoint is a CDC relay's durable progress: every outbox insert committed at or before
// Position was acknowledged by the sink (and marked published). It is stored in the outbox's
// database and advanced only after the acknowledgement.
type Checkpoint struct {
	Source     string // ChangeSource.Identity of the log Position belongs to
	Position   string // encoded by the source; opaque to core
	Generation int64  // the publisher generation that wrote it
	UpdatedAt  time.Time
}

// CheckpointStore keeps one CDC checkpoint per outbox.
type CheckpointStore interface {
	// LoadCheckpoint returns the checkpoint; ok=false when none was ever saved.
	LoadCheckpoint(ctx context.Context) (c Checkpoint, ok bool, err error)
	// SaveCheckpoint replaces the checkpoint, in one transaction that first checks that
	// c.Generation is the outbox's current publisher generation; when it is not, it changes
	// nothing and returns an error wrapping ErrFenced. UpdatedAt is set by the database.
	SaveCheckpoint(ctx context.Context, c Checkpoint) error
}

// CDCStore is what CDCRelay needs from an adapter: the polling relay's store (lanes, fetch and
// settle serve the backfill and the marks) and the checkpoint.
type CDCStore interface {
	RelayStore
	CheckpointStore
}

// ChangeTx is one committed transaction of the change log, reduced to its outbox inserts.
type ChangeTx struct {
	// Records are the outbox rows the transaction inserted, in statement order. They are
	// complete (Seq, Lane, CreatedAt and every Event field), unpublished and never attempted.
	// Empty for a transaction that wrote no outbox row, or for a keepalive that only moves
	// Position.
	Records []Record
	// Position is the log position just after the transaction's commit: resuming from it
	// streams the transactions committed after this one.
	Position string
}

// ChangeStream reads committed transactions from the change log, in commit order.
type ChangeStream interface {
	// Next blocks until the next committed transaction (or a keepalive position) is available.
	// A lost position is reported as a *PositionLostError.
	Next(ctx context.Context) (ChangeTx, error)
	// Confirm tells the database that the log up to position is checkpointed and may be
	// recycled (PostgreSQL: the slot's flushed position). Sources that cannot may do nothing.
	Confirm(ctx context.Context, position string) error
	// Close ends the stream and releases its connection.
	Close() error
}

// VisibleWaiter is the optional ChangeStream capability of a database that may stream a commit
// a moment before other sessions see the transaction's rows (PostgreSQL: the commit record is in
// the log before the committing session leaves the running set of new snapshots). A mark that
// ran in that moment would change nothing and leave the records unpublished for good, so the CDC
// relay calls AwaitVisible before it marks records the stream returned at or before position
// (after their send, by when the moment has almost always passed). A stream without it must
// return only transactions whose records the store's Settle finds (on MySQL/MariaDB the mark's
// locking read waits for an inserting transaction that is still committing).
type VisibleWaiter interface {
	// AwaitVisible returns once new statements see the rows of every transaction the stream
	// returned at or before position, or ctx ends.
	AwaitVisible(ctx context.Context, position string) error
}

// Retention is how much change log the database keeps for a checkpoint. -1 means unknown.
type Retention struct {
	// RetainedBytes is the log held for the relay from its checkpoint to the head of the log
	// (PostgreSQL: the slot's restart_lsn to the current WAL position; MySQL: the checkpoint to
	// the end of the newest binary log). It is the disk the relay's lag costs.
	RetainedBytes int64
	// HeadroomBytes is, for logs the server expires on its own (MySQL), how much log lies between
	// the oldest one still on the server and the checkpoint: purging more loses the position.
	// -1 where the relay's checkpoint pins the log (PostgreSQL slots).
	HeadroomBytes int64
}

// ChangeSource is one change log of one outbox table.
type ChangeSource interface {
	// Identity names the log (server identity, slot or table) so that a checkpoint of another log
	// is never resumed.
	Identity(ctx context.Context) (string, error)
	// Start opens a stream at the current head of the log, creating what the log needs (a
	// replication slot) and replacing a stale one. Every transaction committed before the
	// returned position is visible to queries begun after Start returns; every one committed
	// after it is streamed. Backfill relies on that.
	Start(ctx context.Context) (stream ChangeStream, position string, err error)
	// Resume opens a stream of the transactions committed after position. When the log no longer
	// holds position it returns a *PositionLostError, never a stream starting elsewhere.
	Resume(ctx context.Context, position string) (ChangeStream, error)
	// Retention reports the log the database retains for position.
	Retention(ctx context.Context, position string) (Retention, error)
}

// Liveness is an optional RelayStore capability: a sign of life of a lease owner that the
// database itself ends when the owner's session ends (PostgreSQL: a session-level advisory
// lock; MySQL and MariaDB: GET_LOCK). While an owner holds it, ClaimLanes records it with every
// lease it takes for that owner, and any claimer may take a lane whose recorded sign of life is
// gone although its lease has not expired. A crashed relay's successor then takes over as soon
// as the database has noticed the dead session (usually at once: the kernel closes a killed
// process's connections) instead of after LeaseTTL.
//
// It does not replace lease fencing: an owner that is alive but slow keeps its session and so
// its lanes until the lease expires, and every lane taken over gets a new generation, so the
// old holder's marks and renewals fail (ErrClaimLost, *LanesLostError) if it was alive after
// all (its database session alone had broken).
type Liveness interface {
	// HoldLiveness takes owner's sign of life on a database session of its own. Until the
	// returned Life is released, ClaimLanes of owner ties the leases it takes to that session.
	HoldLiveness(ctx context.Context, owner string) (Life, error)
}

// Life is a held sign of life (Liveness).
type Life interface {
	// Check returns nil while the sign of life is held, and an error once its session has
	// ended: other claimers may then take the owner's lanes.
	Check(ctx context.Context) error
	// Release ends the sign of life and closes its session. Leases stay until they are
	// released or expire.
	Release() error
}

// LogReleaser is an optional ChangeSource capability: Release drops what holds the log for the
// source (a PostgreSQL replication slot), so the database may recycle it. The position is lost.
type LogReleaser interface {
	Release(ctx context.Context) error
}
