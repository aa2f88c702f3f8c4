package rabbitmq

// DecodeDelivery exports decodeDelivery to the tests.
var DecodeDelivery = decodeDelivery
