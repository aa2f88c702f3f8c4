package webhook

import "github.com/outboxkit/outbox/core"

// DecodeRequest is decodeRequest, for the tests.
var DecodeRequest = decodeRequest

// DecodeBatch is decodeBatch, for the tests: the events of a batch body.
func DecodeBatch(body []byte) ([]core.Event, error) {
	d, err := decodeBatch(body)
	if err != nil {
		return nil, err
	}
	evs := make([]core.Event, len(d))
	for i := range d {
		evs[i] = d[i].ev
	}
	return evs, nil
}
