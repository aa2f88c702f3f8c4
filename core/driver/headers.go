package driver

// Headers that Outbox.Write adds to every event so that a consumer can tell which events were
// written together (atomic group visibility). They travel with the other headers in every
// sink's wire format. Write replaces a caller's value for these keys; they are added after
// validation and do not count towards Limits.
const (
	// HeaderTxID identifies the group: a UUIDv7 shared by every event of one Write call, or
	// of every Write call made with one WithTxGroup context.
	HeaderTxID = "outbox.tx_id"
	// HeaderTxIndex is the event's 0-based position in its group, in write order (decimal).
	HeaderTxIndex = "outbox.tx_index"
	// HeaderTxCount is the number of events in the group (decimal). It is present only when
	// Write knows it: for a Write call without a WithTxGroup context, where the group is that
	// call. Events written through WithTxGroup carry no count, since later calls may add more.
	HeaderTxCount = "outbox.tx_count"
)
