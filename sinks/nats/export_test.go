package nats

import "github.com/outboxkit/outbox/core"

// DecodeMsg is decodeMsg, for the tests' read-back.
var DecodeMsg = decodeMsg

// EncodedSize is the size the sink counts for m against max_payload.
func EncodedSize(m *core.Message) int { return encodedSize(encode(m, DefaultSource, "")) }
