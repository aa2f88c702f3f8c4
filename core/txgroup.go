package core

import (
	"context"
	"strconv"
	"sync"

	"github.com/google/uuid"
)

// txGroup is the state WithTxGroup puts in a context: the group's id and the next index.
type txGroup struct {
	id   string
	mu   sync.Mutex
	next int
}

type txGroupKey struct{}

// WithTxGroup returns a context under which every Outbox.Write call shares one transaction id
// (HeaderTxID) and continues one index (HeaderTxIndex), for a transaction that writes its
// events in several calls. Use one such context per transaction. Without it, each Write call
// is its own group and also carries HeaderTxCount; write the events that consumers must see
// together in one call when they need the count.
func WithTxGroup(ctx context.Context) (context.Context, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, txGroupKey{}, &txGroup{id: id.String()}), nil
}

// withoutTxHeaders returns h without the group headers, which Write replaces: a caller's value
// for them is neither validated nor counted towards Limits. The caller's map is copied only
// when it holds one of them.
func withoutTxHeaders(h map[string]string) map[string]string {
	_, id := h[HeaderTxID]
	_, index := h[HeaderTxIndex]
	_, count := h[HeaderTxCount]
	if !id && !index && !count {
		return h
	}
	c := make(map[string]string, len(h))
	for k, v := range h {
		if k != HeaderTxID && k != HeaderTxIndex && k != HeaderTxCount {
			c[k] = v
		}
	}
	return c
}

// stampTxGroup sets the group headers on the normalized events of one Write call. The events'
// Headers maps are copies owned by Write or shared with the caller, so each event gets a new map.
func stampTxGroup(ctx context.Context, evs []Event) error {
	var id string
	first, count := 0, len(evs)
	if g, ok := ctx.Value(txGroupKey{}).(*txGroup); ok {
		g.mu.Lock()
		id, first = g.id, g.next
		g.next += len(evs)
		g.mu.Unlock()
		count = -1
	} else {
		u, err := uuid.NewV7()
		if err != nil {
			return err
		}
		id = u.String()
	}
	for i := range evs {
		h := make(map[string]string, len(evs[i].Headers)+3)
		for k, v := range evs[i].Headers {
			h[k] = v
		}
		h[HeaderTxID] = id
		h[HeaderTxIndex] = strconv.Itoa(first + i)
		if count >= 0 {
			h[HeaderTxCount] = strconv.Itoa(count)
		} else {
			delete(h, HeaderTxCount)
		}
		evs[i].Headers = h
	}
	return nil
}
