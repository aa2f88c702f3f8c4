package nats

import "github.com/outboxkit/outbox/core"

// DecodeMsg is decodeMsg, for the tests' read-back.
var DecodeMsg = decodeMsg

// EncodedSize is the size the sink counts for m against max_payload.
func EncodedSize(m *core.Message) int { return encodedSize(encode(m, DefaultSource, "")) }

// Encode lets the benchmarks' bare client loop publish exactly the sink's messages.
var Encode = encode
