package driver

import (
	"context"
	"fmt"
)

// LaneResizer is the optional operator capability of changing the lane count of an existing
// outbox (`outboxkit lanes resize`). Every adapter of this module implements it.
//
// The lane count is part of the storage format: every row stores LaneOf(partition key, lanes),
// and a relay publishes each lane's rows in seq order, so per-key order holds because all
// unpublished events of a key sit in one lane. A resize keeps that true by moving, in one
// transaction, every unpublished row of every key to the key's lane under the new count, while
// no writer that computed lanes with the old count can commit a row (LaneInserter) and no relay
// can settle a batch it fetched under the old lanes (every lease ends).
type LaneResizer interface {
	// ResizeLanes changes the lane count to lanes in one transaction that (1) waits for the
	// writer transactions in flight and holds new ones back (their checked inserts see the new
	// count once it commits, and are refused with ErrLaneCountChanged if they computed lanes
	// with the old one), (2) locks every lane row and ends every lease as ResetLanes does
	// (owner and sign of life cleared, lease expired, generation incremented, so whatever a
	// running relay settles or renews afterwards is refused and its batch is sent again by the
	// lane's next owner: duplicates, never reordering), (3) adds or removes lane rows, (4) sets
	// the lane of every unpublished row (pending, retrying or parked) to LaneOf(its partition
	// key, lanes), (5) records lanes as the outbox's lane count and (6) writes audit with Rows
	// set to the rows moved. It returns how many rows it moved (rows whose lane changed).
	//
	// lanes outside [1, MaxLanes] returns an *OptionError (CheckResizeLanes) and changes
	// nothing; lanes equal to the current count changes nothing, writes no audit row and returns
	// 0. An outbox whose publisher generation is a CDC relay's returns an error wrapping
	// ErrResizeCDC, changing nothing. Running polling relays pick the new count up at their next
	// maintenance round (RelayOptions.RenewInterval) and claim the new lanes.
	ResizeLanes(ctx context.Context, lanes int, audit AuditEntry) (int, error)
}

// LaneInserter is the optional OutboxStore capability that makes a resize safe for writers:
// an Insert checked against the lane count the records' lanes were computed with.
// Outbox.Write uses it when the store has it.
type LaneInserter[TTx any] interface {
	// InsertLanes is Insert of records whose Lane is LaneOf(key, lanes). When the outbox's
	// lane count is no longer lanes it writes nothing and returns an error wrapping
	// ErrLaneCountChanged; tx stays usable (the caller may insert again with the new count,
	// which LaneCount then returns) unless the database had to abort it (PostgreSQL refuses a
	// REPEATABLE READ or SERIALIZABLE transaction whose snapshot predates the resize with a
	// serialization failure: roll back and retry the transaction). A transaction that inserted
	// rows holds a resize back until it ends, so its rows are moved if they are still
	// unpublished.
	InsertLanes(ctx context.Context, tx TTx, lanes int, records []Record) error
}

// CheckResizeLanes checks a ResizeLanes lane count: between 1 and MaxLanes.
func CheckResizeLanes(lanes int) error {
	if lanes < 1 || lanes > MaxLanes {
		return &OptionError{Field: "lanes", Reason: fmt.Sprintf("must be between 1 and %d", MaxLanes)}
	}
	return nil
}
