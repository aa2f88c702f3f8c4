// Package capacity holds what the capacity-model benchmark (BENCHMARKS.md, "Capacity model")
// needs besides the library itself: an SQS endpoint that answers after a lognormal delay, so
// that the relay → SQS path pays a remote broker's latency without a remote broker.
//
// The endpoint answers SendMessageBatch itself (every entry successful, with the body's MD5 as
// SQS returns it) or, given an upstream such as the SQS emulator, forwards every request there
// after the delay. The benchmark runs it in a child process, so that its CPU time is not counted
// as the relay's.
package capacity

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// z99 is the standard normal quantile of 0.99.
const z99 = 2.3263478740408408

// Latency is a lognormal delay given by its median and its 99th percentile.
type Latency struct {
	P50, P99 time.Duration
}

// Model is the broker latency of the design document's capacity model: 12 ms median, 80 ms p99.
var Model = Latency{P50: 12 * time.Millisecond, P99: 80 * time.Millisecond}

// Sample draws one delay: exp(mu + sigma·N(0,1)) with mu = ln P50 and sigma = ln(P99/P50)/z99.
// A zero Latency always returns 0.
func (l Latency) Sample(r *rand.Rand) time.Duration {
	if l.P50 <= 0 {
		return 0
	}
	sigma := 0.0
	if l.P99 > l.P50 {
		sigma = math.Log(float64(l.P99)/float64(l.P50)) / z99
	}
	return time.Duration(float64(l.P50) * math.Exp(sigma*r.NormFloat64()))
}

// Broker is an http.Handler speaking enough of the SQS JSON protocol for SendMessageBatch.
type Broker struct {
	lat      Latency
	proxy    *httputil.ReverseProxy // nil: answer here
	mu       sync.Mutex
	rng      *rand.Rand
	requests atomic.Int64
	entries  atomic.Int64
}

// NewBroker returns a broker delaying every request by lat. upstream, when not empty, is the
// base URL every request is forwarded to after the delay; otherwise the broker answers
// SendMessageBatch itself and refuses other operations. seed makes the delays reproducible.
func NewBroker(lat Latency, upstream string, seed uint64) (*Broker, error) {
	b := &Broker{lat: lat, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if upstream != "" {
		u, err := url.Parse(upstream)
		if err != nil {
			return nil, err
		}
		b.proxy = httputil.NewSingleHostReverseProxy(u)
		b.proxy.Transport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}
	}
	return b, nil
}

// Counts returns the requests and SendMessageBatch entries answered so far.
func (b *Broker) Counts() (requests, entries int64) { return b.requests.Load(), b.entries.Load() }

func (b *Broker) delay() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lat.Sample(b.rng)
}

// ServeHTTP implements http.Handler.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if d := b.delay(); d > 0 {
		time.Sleep(d)
	}
	b.requests.Add(1)
	if b.proxy != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		b.proxy.ServeHTTP(w, r)
		return
	}
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SendMessageBatch") {
		fail(w, "UnsupportedOperation", "this endpoint answers SendMessageBatch only")
		return
	}
	var in struct {
		Entries []struct {
			ID          string `json:"Id"`
			MessageBody string `json:"MessageBody"`
		} `json:"Entries"`
	}
	if err := json.Unmarshal(body, &in); err != nil || len(in.Entries) == 0 {
		fail(w, "InvalidParameterValue", "a SendMessageBatch request with entries was expected")
		return
	}
	type ok struct {
		ID        string `json:"Id"`
		MessageID string `json:"MessageId"`
		MD5       string `json:"MD5OfMessageBody"`
	}
	var out struct {
		Successful []ok  `json:"Successful"`
		Failed     []any `json:"Failed"`
	}
	out.Failed = []any{}
	n := b.entries.Add(int64(len(in.Entries)))
	for k, e := range in.Entries {
		sum := md5.Sum([]byte(e.MessageBody))
		out.Successful = append(out.Successful, ok{ID: e.ID, MessageID: "m-" + strconv.FormatInt(n-int64(len(in.Entries)-k), 10),
			MD5: hex.EncodeToString(sum[:])})
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(&out)
}

func fail(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", code+";Sender")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}
