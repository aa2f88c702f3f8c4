package nats

// DecodeMsg is decodeMsg, for the tests' read-back.
var DecodeMsg = decodeMsg
