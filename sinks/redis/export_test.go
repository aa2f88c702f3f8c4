package redis

// DecodeEntry is decodeEntry, for the tests that read streams back.
var DecodeEntry = decodeEntry
