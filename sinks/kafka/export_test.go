package kafka

// EncodeHeaders lets the benchmarks' bare producer loop send exactly the sink's headers.
var EncodeHeaders = encodeHeaders

// DecodeRecord lets the sink's conformance test read records back as the consumer does.
var DecodeRecord = decodeRecord
