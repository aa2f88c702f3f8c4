package kafka

// EncodeHeaders lets the benchmarks' bare producer loop send exactly the sink's headers.
var EncodeHeaders = encodeHeaders
