package webhook

// DecodeRequest is decodeRequest, for the tests.
var DecodeRequest = decodeRequest
