package sinkkit

import (
	"strconv"

	"github.com/outboxkit/outbox/sinks/awssink"
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
