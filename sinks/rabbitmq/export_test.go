package rabbitmq

// DecodeDelivery exports decodeDelivery to the tests.
var DecodeDelivery = decodeDelivery

// Publishing lets the benchmarks' bare client loop publish exactly the sink's messages.
var Publishing = publishing
