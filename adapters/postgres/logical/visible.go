package logical

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
)

// PostgreSQL writes a transaction's commit record to the log, and a walsender may decode and
// stream it, a moment before the committing session leaves the set of running transactions that
// new snapshots see: for that moment a new statement does not see the transaction's rows, and a
// relay marking its records then would update nothing and leave them unpublished for good. The
// stream hands transactions out at once and remembers their IDs; the CDC relay calls
// AwaitVisible (driver.VisibleWaiter) before it marks, after the send, by when the window has
// almost always closed: one snapshot read per settle, which shows every transaction that
// committed before it.

// streamed is a transaction the stream handed out that no snapshot has shown yet.
type streamed struct {
	pos pglogrepl.LSN
	xid uint32
}

// pgSnapshot is pg_current_snapshot(): transactions below xmin are finished, those at or above
// xmax are not, and xip lists the ones in between still running.
type pgSnapshot struct {
	xmin, xmax uint64
	xip        map[uint64]struct{}
}

// parseSnapshot parses the text form "xmin:xmax:xip1,xip2,...".
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("snapshot %q", s)
	}
	var snap pgSnapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	if parts[2] != "" {
		snap.xip = map[uint64]struct{}{}
		for x := range strings.SplitSeq(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return pgSnapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
			}
			snap.xip[v] = struct{}{}
		}
	}
	return snap, nil
}

// widen returns the 64-bit transaction ID of the 32-bit xid of a transaction the log streamed:
// the one of the same 32-bit value nearest to xmax (a streamed transaction's ID is never more
// than 2^31 from the current ones).
func (s pgSnapshot) widen(xid uint32) uint64 {
	x := s.xmax&^0xFFFFFFFF | uint64(xid)
	switch {
	case x > s.xmax && x-s.xmax > 1<<31 && x >= 1<<32:
		x -= 1 << 32
	case x < s.xmax && s.xmax-x > 1<<31:
		x += 1 << 32
	}
	return x
}

// shows reports whether the transaction xid is finished in the snapshot (for a streamed one:
// committed and visible to statements that take it).
func (s pgSnapshot) shows(xid uint32) bool {
	x := s.widen(xid)
	if x < s.xmin {
		return true
	}
	if x >= s.xmax {
		return false
	}
	_, running := s.xip[x]
	return !running
}

// noteStreamed remembers a transaction with records that the stream hands out (the reader).
func (st *changeStream) noteStreamed(pos pglogrepl.LSN, xid uint32) {
	st.visMu.Lock()
	st.unseen = append(st.unseen, streamed{pos: pos, xid: xid})
	st.visMu.Unlock()
}

// AwaitVisible implements driver.VisibleWaiter: it returns once a snapshot shows every
// transaction the stream handed out at or before position as committed, reading a new snapshot
// (after a short pause from the second on) while the last one does not; it ends early when ctx
// ends or the stream closes.
func (st *changeStream) AwaitVisible(ctx context.Context, position string) error {
	upTo, err := pglogrepl.ParseLSN(position)
	if err != nil {
		return fmt.Errorf("postgres: await visible: position %q: %w", position, err)
	}
	for try := 0; ; try++ {
		if st.shown(upTo) {
			return nil
		}
		if try > 1 {
			t := time.NewTimer(time.Duration(min(try, 50)) * 100 * time.Microsecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-st.closing:
				t.Stop()
				return errStreamClosed
			case <-t.C:
			}
		}
		// Outside the lock: the reader notes the transactions it hands out meanwhile.
		var text string
		if err := st.src.db.QueryRow(ctx, `SELECT pg_current_snapshot()::text`, nil, &text); err != nil {
			return fmt.Errorf("postgres: await visible: current snapshot: %w", st.src.db.Classify(err))
		}
		snap, err := parseSnapshot(text)
		if err != nil {
			return fmt.Errorf("postgres: await visible: %w", err)
		}
		st.visMu.Lock()
		st.snap = &snap
		st.visMu.Unlock()
	}
}

// shown forgets the leading unseen transactions the last snapshot shows and reports whether
// none at or before upTo is left.
func (st *changeStream) shown(upTo pglogrepl.LSN) bool {
	st.visMu.Lock()
	defer st.visMu.Unlock()
	n := 0
	for n < len(st.unseen) && st.unseen[n].pos <= upTo && st.snap != nil && st.snap.shows(st.unseen[n].xid) {
		n++
	}
	st.unseen = st.unseen[n:]
	return len(st.unseen) == 0 || st.unseen[0].pos > upTo
}
