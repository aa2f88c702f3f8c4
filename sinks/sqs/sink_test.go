package sqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sqs"
)

func send(t *testing.T, s core.Sink, msgs []core.Message) []error {
	t.Helper()
	out := s.Send(context.Background(), msgs)
	require.NoError(t, core.CheckOutcomes(msgs, out), "sink broke the prefix rule")
	return out
}

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	e := &env{sqs: awssqs.New(awssqs.Options{Region: testRegion})}
	for field, o := range map[string]*sqs.Options{
		"MaxRequestBytes":   {MaxRequestBytes: 2 << 20},
		"MaxBatchEntries":   {MaxBatchEntries: 11},
		"Concurrency":       {Concurrency: -1},
		"RequestTimeout":    {RequestTimeout: -time.Second},
		"ClaimCheck.Client": {ClaimCheck: &sqs.ClaimCheck{Bucket: "b"}},
	} {
		_, err := sqs.New(e.sqs, o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, field, oe.Field)
	}
	_, err := sqs.New(nil, nil)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
}

func TestBatchingSendsTenPerRequestWithWireFormat(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("batch"), nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)

	var msgs []core.Message
	for i := 0; i < 25; i++ {
		payload := []byte(fmt.Sprintf(`{"n":%d,"s":"é€"}`, i))
		if i == 3 {
			payload = []byte{0, 1, 0xff} // not text: base64
		}
		if i == 4 {
			payload = nil
		}
		msgs = append(msgs, event(url, fmt.Sprint("g", i%4), i, payload))
	}
	before := e.reqs.sendBatch.Load()
	out := send(t, sink, msgs)
	for i, err := range out {
		require.NoError(t, err, "message %d", i)
	}
	// 4 groups of 7, 6, 6 and 6 messages, at most 10 per request, several requests in flight
	// (the default Concurrency): one request per group, all at once (sinks/batcher.Plan).
	require.Equal(t, int64(4), e.reqs.sendBatch.Load()-before, "25 messages, one request per group")

	got := e.receive(t, url, 25, 30*time.Second)
	require.Equal(t, 25, len(got))
	byID := map[string]types.Message{}
	for _, m := range got {
		byID[attr(m, "outbox.id")] = m
	}
	for i, m := range msgs {
		r, ok := byID[m.ID]
		require.True(t, ok, "message %d not received", i)
		require.Equal(t, "order.updated", attr(r, "outbox.type"))
		require.Equal(t, "order/"+m.AggregateID, attr(r, "outbox.aggregate"))
		require.Equal(t, fmt.Sprint(i+1), attr(r, "outbox.aggregate_version"))
		require.Equal(t, "Number", aws.ToString(r.MessageAttributes["outbox.aggregate_version"].DataType))
		require.Equal(t, "order.v1", attr(r, "outbox.schema_id"))
		require.Equal(t, "acme", attr(r, "outbox.tenant"))
		require.Equal(t, "cause-"+m.ID, attr(r, "outbox.causation_id"))
		require.Equal(t, "corr-1", attr(r, "outbox.correlation_id"))
		require.Equal(t, m.Headers["traceparent"], attr(r, "traceparent"))
		require.LessOrEqual(t, len(r.MessageAttributes), 10)
		var meta map[string]any
		require.NoError(t, json.Unmarshal([]byte(attr(r, "outbox.meta")), &meta))
		require.Equal(t, float64(1), meta["v"])
		require.Equal(t, m.PartitionKey, meta["partition_key"])
		require.Equal(t, map[string]any{"x-app": "test"}, meta["headers"])
		require.Equal(t, m.CreatedAt.Format("2006-01-02T15:04:05.000000Z07:00"), meta["created_at"])
		switch i {
		case 3:
			require.Equal(t, "base64", meta["encoding"])
			require.Equal(t, "AAH/", aws.ToString(r.Body))
		case 4:
			require.Equal(t, "empty", meta["encoding"])
		default:
			require.NotContains(t, meta, "encoding")
			require.Equal(t, string(m.Payload), aws.ToString(r.Body))
		}
	}
}

func TestFIFOGroupAndDeduplication(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("fifo")+".fifo", nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 12; i++ {
		msgs = append(msgs, event(url, fmt.Sprint("g", i%2), i, []byte(fmt.Sprint(i))))
	}
	msgs[5].GroupID = "order/with space" // not a valid MessageGroupId: hashed
	msgs[5].PartitionKey = msgs[5].GroupID
	for i, err := range send(t, sink, msgs) {
		require.NoError(t, err, "message %d", i)
	}
	// The same event IDs again, inside the deduplication window: acknowledged, dropped by SQS.
	for i, err := range send(t, sink, msgs[:4]) {
		require.NoError(t, err, "resend %d", i)
	}
	got := e.receive(t, url, 12, 30*time.Second)
	require.Equal(t, 12, len(got))
	require.Empty(t, e.receive(t, url, 1, 2*time.Second), "the resent event IDs were deduplicated")
	order := map[string][]string{}
	for _, r := range got {
		id := attr(r, "outbox.id")
		require.Equal(t, id, r.Attributes["MessageDeduplicationId"])
		order[r.Attributes["MessageGroupId"]] = append(order[r.Attributes["MessageGroupId"]], id)
	}
	want := map[string][]string{}
	for _, m := range msgs {
		g := m.GroupID
		if strings.Contains(g, " ") {
			g = "sha256-"
		}
		want[g] = append(want[g], m.ID)
	}
	for g, ids := range order {
		if strings.HasPrefix(g, "sha256-") {
			require.Len(t, g, 71)
			require.Equal(t, want["sha256-"], ids)
			continue
		}
		require.Equal(t, want[g], ids, "group %s in order", g)
	}
	require.Len(t, order, 3)
}

func TestPerEntryFailureHoldsBackItsGroupOnly(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprint("strict=", strict), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			url := e.queue(t, randName("small"), map[string]string{"MaximumMessageSize": "1024"})
			sink, err := sqs.New(e.sqs, &sqs.Options{StrictGroupOrder: strict})
			require.NoError(t, err)
			msgs := []core.Message{
				event(url, "a", 0, []byte("a0")),
				event(url, "b", 0, []byte("b0")),
				event(url, "a", 1, []byte(strings.Repeat("x", 2000))), // over the queue's limit
				event(url, "b", 1, []byte("b1")),
				event(url, "a", 2, []byte("a2")),
				event(url, "c", 0, []byte("c0")),
				event(url, "a", 3, []byte("a3")),
			}
			out := send(t, sink, msgs)
			require.NoError(t, out[0])
			require.NoError(t, out[1])
			require.Error(t, out[2])
			require.True(t, core.IsPermanent(out[2]), "oversize entry is permanent: %v", out[2])
			require.NoError(t, out[3])
			require.ErrorIs(t, out[4], core.ErrNotAcknowledged)
			require.NoError(t, out[5])
			require.ErrorIs(t, out[6], core.ErrNotAcknowledged)
			got := e.receive(t, url, 4, 30*time.Second)
			got = append(got, e.receive(t, url, 10, time.Second)...) // and whatever else arrived
			ids := map[string]bool{}
			for _, r := range got {
				ids[attr(r, "outbox.id")] = true
			}
			for _, i := range []int{0, 1, 3, 5} {
				require.True(t, ids[msgs[i].ID], "message %d delivered", i)
			}
			require.False(t, ids[msgs[2].ID])
			if strict {
				// One message of a group per request: nothing of group a after the failure was sent.
				require.False(t, ids[msgs[4].ID])
				require.False(t, ids[msgs[6].ID])
			}
		})
	}
}

func TestOversizeWithoutClaimCheckIsPermanentAndNotSent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("big"), nil)
	sink, err := sqs.New(e.sqs, &sqs.Options{MaxRequestBytes: 4096})
	require.NoError(t, err)
	before := e.reqs.sendBatch.Load()
	out := send(t, sink, []core.Message{event(url, "a", 0, make([]byte, 5000)), event(url, "a", 1, []byte("y")), event(url, "b", 0, []byte("z"))})
	require.ErrorIs(t, out[0], sqs.ErrMessageTooLarge)
	require.True(t, core.IsPermanent(out[0]))
	require.ErrorIs(t, out[1], core.ErrNotAcknowledged)
	require.NoError(t, out[2])
	require.Equal(t, int64(1), e.reqs.sendBatch.Load()-before)
}

func TestSizeLimitSplitsRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("split"), nil)
	sink, err := sqs.New(e.sqs, &sqs.Options{MaxRequestBytes: 8 << 10})
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 10; i++ {
		msgs = append(msgs, event(url, fmt.Sprint("g", i), 0, []byte(strings.Repeat("p", 3000))))
	}
	before := e.reqs.sendBatch.Load()
	for _, err := range send(t, sink, msgs) {
		require.NoError(t, err)
	}
	require.Equal(t, int64(5), e.reqs.sendBatch.Load()-before, "two 3 KB messages (plus attributes) per 8 KiB request")
	require.Equal(t, 10, len(e.receive(t, url, 10, 15*time.Second)))
}

func TestManyGroupsManyQueuesKeepPrefixRule(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q1 := e.queue(t, randName("multi1")+".fifo", nil)
	q2 := e.queue(t, randName("multi2")+".fifo", nil)
	sink, err := sqs.New(e.sqs, &sqs.Options{Concurrency: 4})
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 200; i++ {
		dest := q1
		if i%3 == 0 {
			dest = q2
		}
		msgs = append(msgs, event(dest, fmt.Sprint("g", i%7), i, []byte(fmt.Sprint(i))))
	}
	for _, err := range send(t, sink, msgs) {
		require.NoError(t, err)
	}
	got := append(e.receive(t, q1, 133, 30*time.Second), e.receive(t, q2, 67, 30*time.Second)...)
	require.Equal(t, 200, len(got))
	// Per queue and group, SQS FIFO hands messages out in the order they were accepted.
	pos := map[string]int{}
	for i, m := range msgs {
		pos[m.ID] = i
	}
	last := map[string]int{}
	for _, r := range got {
		m := msgs[pos[attr(r, "outbox.id")]]
		k := m.Destination + " " + r.Attributes["MessageGroupId"]
		p := pos[m.ID]
		if l, ok := last[k]; ok {
			require.Greater(t, p, l, "queue/group %s out of order", k)
		}
		last[k] = p
	}
}
