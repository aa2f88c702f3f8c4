// Package batcher splits one core.Sink Send call into broker requests and runs them while
// keeping the sink contract: one outcome per message and, per group, acknowledged messages
// forming a prefix of the call's messages (core.CheckOutcomes holds whatever the broker
// answers). It is the machinery the SQS, SNS and Kafka sinks share, exported so that a sink
// written outside this module (NATS, Pub/Sub, ...) keeps the same per-group prefix rule
// without re-implementing it.
//
// A sink builds one Item per message (its group, destination and encoded size, or the error
// that keeps it from being sent), then calls Run with a SendFunc that performs one broker
// request and returns one outcome per entry of that request.
//
// Planning places messages into batches of one destination (at most Options.MaxEntries
// entries and Options.MaxBytes bytes each), never placing a message of a group in an earlier
// batch than the group's previous message. With several requests in flight
// (Options.Concurrency) to destinations that keep order, it keeps each group's messages
// together (in chunks of one request, chunk n of every group in the n-th wave of batches), so
// that the batches of a wave share no group and go out at once; otherwise it packs them
// first-fit into the fewest batches (see Plan). With Options.OnePerGroup a batch holds at
// most one message of each group (for brokers that handle the entries of one request
// independently).
//
// Running starts every batch once the earlier batches that share a group with it have
// finished, so two batches of one group are never in flight at once (except to the
// destinations Options.Unordered names, which keep no order anyway), and at most
// Options.Concurrency batches at a time. Before a batch is sent, the messages of groups that
// already failed in this call are dropped from it and reported core.ErrNotAcknowledged. After
// it returns, a message the broker acknowledged behind a failed message of its group in the
// same request is reported core.ErrNotAcknowledged: it was accepted, so the relay's resend is
// a duplicate, never a loss. A SendFunc that returns the wrong number of outcomes gets
// core.ErrNotAcknowledged for the whole request; a cancelled context fails the batches not
// yet started with the context's error (retryable).
//
// An Item with Err set is that message's outcome without sending it (it could not be encoded,
// it is too large, ...), and the later messages of its group in the call are held back.
package batcher
