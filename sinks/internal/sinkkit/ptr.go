package sinkkit

import (
	"strconv"
	"sync"

	"github.com/outboxkit/outbox/sinks/awssink"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// The request fields that repeat across every request (entry ids, attribute data types) point
// to these shared strings instead of a new *string each: the SDK only reads them while it
// serialises the request. Nothing may write through the pointers.
var (
	entryIDs = func() (ids [awssink.MaxBatchEntries]string) {
		for k := range ids {
			ids[k] = strconv.Itoa(k)
		}
		return ids
	}()
	dataTypes = [...]string{"String", "Number", "Binary"}
)

// EntryID returns the Id of the k-th entry of a request: its decimal index (EntryIndex reads it
// back).
func EntryID(k int) *string {
	if k >= 0 && k < len(entryIDs) {
		return &entryIDs[k]
	}
	s := strconv.Itoa(k)
	return &s
}

// DataType returns a message attribute's DataType.
func DataType(t string) *string {
	for i := range dataTypes {
		if dataTypes[i] == t {
			return &dataTypes[i]
		}
	}
	return &t
}

// AttrMaps lends the attribute maps of a request's entries and takes them back, cleared, for
// the next request: the SDK reads them only while it serialises the request, and a cleared map
// keeps its room (a new map of ten attributes per message was a tenth of the send path's bytes).
// V is the SDK's MessageAttributeValue type, built by attr.
type AttrMaps[V any] struct {
	pool sync.Pool
	attr func(a *wire.Attr) V
}

// NewAttrMaps returns the maps of one sink; attr builds an attribute's value.
func NewAttrMaps[V any](attr func(a *wire.Attr) V) *AttrMaps[V] {
	return &AttrMaps[V]{attr: attr, pool: sync.Pool{New: func() any { return new([]map[string]V) }}}
}

// Fill returns the attribute map of each entry, in order, and the function that takes them
// back: call it once the request has returned, and use none of the maps after.
func (p *AttrMaps[V]) Fill(es []Entry) ([]map[string]V, func()) {
	maps := p.pool.Get().(*[]map[string]V)
	for len(*maps) < len(es) {
		*maps = append(*maps, make(map[string]V, 10))
	}
	for k, e := range es {
		m := (*maps)[k]
		for i := range e.Enc.Attrs {
			a := &e.Enc.Attrs[i]
			m[a.Name] = p.attr(a)
		}
	}
	return (*maps)[:len(es)], func() {
		for _, m := range (*maps)[:len(es)] {
			clear(m)
		}
		p.pool.Put(maps)
	}
}
