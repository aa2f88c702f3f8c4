package redis

// DecodeEntry is decodeEntry, for the tests that read streams back.
var DecodeEntry = decodeEntry

// EncodeFields lets the benchmarks' bare client loop write exactly the sink's entries.
var EncodeFields = encodeFields
