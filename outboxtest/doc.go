// Package outboxtest helps an application's tests check what it writes to the outbox and what
// a relay publishes, on any adapter (River's rivertest does the same for jobs).
//
//   - Record wraps the application's driver.OutboxStore and remembers what each transaction
//     wrote through it; Recorder.Tx(tx) is the Source of one transaction, checked before or
//     after it commits.
//   - Mark and Since read what a database's outbox holds beyond a point (driver.Admin): the rows
//     committed since Mark, in sequence order.
//   - Sink is a recording core.Sink; Drain publishes every pending event of an outbox once
//     through a real core.Relay (to a Sink, or any core.Sink) and stops the relay gracefully.
//   - RequireWritten and RequireNotWritten check a Source against a Match (type, aggregate,
//     destination, id, a payload predicate). A failure lists what was written instead. Written
//     and NotWritten are the same checks returning an error, for code without a testing.TB.
//
// The package imports core and the standard library only.
package outboxtest
