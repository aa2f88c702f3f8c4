package sqs_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// fakeSQS answers SendMessageBatch with whatever answer returns (status, JSON body), so that the
// responses the emulator never gives (missing entries, throttling, 5xx) can be tested. No
// emulator needed.
func fakeSQS(t *testing.T, answer func(ids []string) (int, string)) (*awssqs.Client, *[][]string) {
	t.Helper()
	var mu sync.Mutex
	var calls [][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in struct{ Entries []struct{ Id string } }
		_ = json.Unmarshal(body, &in)
		ids := make([]string, len(in.Entries))
		for i, e := range in.Entries {
			ids[i] = e.Id
		}
		mu.Lock()
		calls = append(calls, ids)
		mu.Unlock()
		status, out := answer(ids)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	client := awssqs.New(awssqs.Options{
		Region: testRegion, BaseEndpoint: aws.String(srv.URL), RetryMaxAttempts: 1,
		Credentials:                      credentials.NewStaticCredentialsProvider(testKey, testSecret, ""),
		DisableMessageChecksumValidation: true,
	})
	return client, &calls
}

func plainMsgs(url string, groups ...string) []core.Message {
	var out []core.Message
	for i, g := range groups {
		out = append(out, event(url, g, i, []byte(fmt.Sprint("m", i))))
	}
	return out
}

func TestEntryMissingFromResponseIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	client, _ := fakeSQS(t, func(ids []string) (int, string) {
		// Acknowledge every entry but the second; report nothing about it.
		var ok []string
		for i, id := range ids {
			if i != 1 {
				ok = append(ok, fmt.Sprintf(`{"Id":%q,"MessageId":"m-%s","MD5OfMessageBody":"x"}`, id, id))
			}
		}
		return 200, fmt.Sprintf(`{"Successful":[%s],"Failed":[]}`, join(ok))
	})
	sink, err := sqs.New(client, nil)
	require.NoError(t, err)
	msgs := plainMsgs("http://q/queue", "a", "a", "a", "b")
	out := send(t, sink, msgs)
	require.NoError(t, out[0])
	require.ErrorIs(t, out[1], core.ErrNotAcknowledged)
	require.False(t, core.IsPermanent(out[1]))
	require.ErrorIs(t, out[2], core.ErrNotAcknowledged, "acknowledged behind an unacknowledged message of its group")
	require.NoError(t, out[3])
}

func TestServiceFaultsAreRetryableSenderFaultsPermanent(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status    int
		body      string
		permanent bool
	}{
		"throttling":     {400, `{"__type":"com.amazonaws.sqs#RequestThrottled","message":"slow down"}`, false},
		"internal error": {500, `{"__type":"InternalError","message":"oops"}`, false},
		"unavailable":    {503, `{"__type":"ServiceUnavailable","message":"later"}`, false},
		"invalid param":  {400, `{"__type":"com.amazonaws.sqs#InvalidParameterValue","message":"bad"}`, true},
		"no queue":       {400, `{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"gone"}`, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client, _ := fakeSQS(t, func([]string) (int, string) { return tc.status, tc.body })
			sink, err := sqs.New(client, nil)
			require.NoError(t, err)
			out := send(t, sink, plainMsgs("http://q/queue", "a", "b"))
			for _, err := range out {
				require.Error(t, err)
				require.Equal(t, tc.permanent, core.IsPermanent(err), "%v", err)
			}
		})
	}
}

func TestFailedEntryClassifiedBySenderFault(t *testing.T) {
	t.Parallel()
	client, calls := fakeSQS(t, func(ids []string) (int, string) {
		var ok, failed []string
		for i, id := range ids {
			switch i {
			case 0:
				failed = append(failed, fmt.Sprintf(`{"Id":%q,"Code":"InternalError","Message":"try again","SenderFault":false}`, id))
			case 1:
				failed = append(failed, fmt.Sprintf(`{"Id":%q,"Code":"InvalidParameterValue","Message":"bad","SenderFault":true}`, id))
			default:
				ok = append(ok, fmt.Sprintf(`{"Id":%q,"MessageId":"m","MD5OfMessageBody":"x"}`, id))
			}
		}
		return 200, fmt.Sprintf(`{"Successful":[%s],"Failed":[%s]}`, join(ok), join(failed))
	})
	sink, err := sqs.New(client, &sqs.Options{MaxBatchEntries: 3})
	require.NoError(t, err)
	// One request [a b c]: a fails as a service fault (retryable), b as a sender fault
	// (permanent), c is acknowledged.
	out := send(t, sink, plainMsgs("http://q/queue", "a", "b", "c"))
	require.False(t, core.IsPermanent(out[0]))
	require.True(t, core.IsPermanent(out[1]))
	require.NoError(t, out[2])
	require.Len(t, *calls, 1)

	// Group a's four messages take two requests, [a0 a1 a2] then [a3]: a0 fails in the first,
	// so a2 is not acknowledged and the second request is never made.
	*calls = nil
	out = send(t, sink, plainMsgs("http://q/queue", "a", "a", "a", "a"))
	require.False(t, core.IsPermanent(out[0]))
	require.Error(t, out[1])
	require.ErrorIs(t, out[2], core.ErrNotAcknowledged)
	require.ErrorIs(t, out[3], core.ErrNotAcknowledged)
	require.Len(t, *calls, 1, "the held-back group's later request is not sent")
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// With UnorderedStandard, the requests of one group to a standard queue are in flight at once
// (the first request is answered only once a second one arrived); to a FIFO queue they never
// overlap. Without the option a standard queue waits like a FIFO one.
func TestUnorderedStandardOverlapsRequestsOfOneGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		url       string
		unordered bool
		overlap   bool
	}{
		{"standard", "http://q/queue", true, true},
		{"fifo", "http://q/queue.fifo", true, false},
		{"standard-default", "http://q/queue", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			inflight, most := 0, 0
			second := make(chan struct{})
			var once sync.Once
			client, calls := fakeSQS(t, func(ids []string) (int, string) {
				mu.Lock()
				inflight++
				most = max(most, inflight)
				if inflight == 2 {
					once.Do(func() { close(second) })
				}
				mu.Unlock()
				select { // an overlapping request ends the wait; otherwise it gives up
				case <-second:
				case <-time.After(200 * time.Millisecond):
				}
				mu.Lock()
				inflight--
				mu.Unlock()
				ok := make([]string, len(ids))
				for i, id := range ids {
					ok[i] = fmt.Sprintf(`{"Id":%q,"MessageId":"m-%s","MD5OfMessageBody":"x"}`, id, id)
				}
				return 200, fmt.Sprintf(`{"Successful":[%s],"Failed":[]}`, join(ok))
			})
			sink, err := sqs.New(client, &sqs.Options{MaxBatchEntries: 1, Concurrency: 4, UnorderedStandard: tc.unordered})
			require.NoError(t, err)
			for _, err := range send(t, sink, plainMsgs(tc.url, "a", "a", "a", "a")) {
				require.NoError(t, err)
			}
			require.Len(t, *calls, 4)
			if tc.overlap {
				require.Greater(t, most, 1, "requests of one group in flight at once")
			} else {
				require.Equal(t, 1, most, "one request of a group at a time")
			}
		})
	}
}
