package reliability_test

// Consumer kill points of the crash matrix: SQS consumer processes (this test binary run
// again, see TestMain) killed before their inbox commit or after it and before the delete.

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// The consumer kill points.
const (
	pointBeforeCommit = "before_commit" // SIGKILL in the Nth handler call, its inbox transaction open
	pointBeforeDelete = "before_delete" // SIGKILL at the Nth delete request, after its inbox commits
)

// crashVisibility is the consumer processes' visibility timeout: a killed process's messages
// come back after it.
const crashVisibility = 2 * time.Second

// consumerChild runs an SQS consumer process until it is killed: its inbox and its effects
// table are in the SQLite file sp.DB.Name; the handler inserts one effects row per message in
// the inbox transaction.
func consumerChild(ctx context.Context, sp crashSpec) error {
	h, err := sqlite.OpenDB(ctx, sp.DB.Name)
	if err != nil {
		return err
	}
	s, err := sqlite.New(h, &sqlite.Options{Logger: quiet})
	if err != nil {
		return err
	}
	inbox, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	if err != nil {
		return err
	}
	var handled atomic.Int64
	handler := func(ctx context.Context, tx *sql.Tx, d *sqs.Delivery) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (id, key, version) VALUES (?, ?, ?)",
			d.Event.ID, d.Event.PartitionKey, d.Event.AggregateVersion)
		if sp.Point == pointBeforeCommit && handled.Add(1) == int64(sp.N) {
			testkit.SignalSelf(syscall.SIGKILL)
		}
		return err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	var rt http.RoundTripper = transport
	if sp.Point == pointBeforeDelete {
		// The consumer deletes a batch's messages only after their inbox transactions
		// committed: a delete request is the point between the two.
		var deletes atomic.Int64
		rt = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.Header.Get("X-Amz-Target"), "DeleteMessage") && deletes.Add(1) == int64(sp.N) {
				testkit.SignalSelf(syscall.SIGKILL)
			}
			return transport.RoundTrip(r)
		})
	}
	client := awssqs.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: rt},
	}, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(sp.Endpoint) })
	c, err := sqs.NewConsumer(client, sp.Queue, inbox, "crash", handler, &sqs.ConsumerOptions{
		MaxMessages: 5, WaitTime: time.Second, VisibilityTimeout: crashVisibility, Logger: quiet,
	})
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(sp.Log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	go func() { // what it did so far, for the test to read after the kill
		for range time.Tick(50 * time.Millisecond) {
			st := c.Stats()
			_, _ = fmt.Fprintf(logf, "stats %d %d %d %d %d\n", st.Received, st.Applied, st.Duplicate, st.Failed, st.Deleted)
		}
	}()
	return c.Run(ctx)
}

// consumerStats is the last "stats" line of a consumer process's log: received, applied,
// duplicate, failed, deleted.
func consumerStats(path string) ([5]int, error) {
	var st [5]int
	lines, err := readLines(path)
	if err != nil {
		return st, err
	}
	for _, l := range lines {
		var x [5]int
		if _, err := fmt.Sscanf(l, "stats %d %d %d %d %d", &x[0], &x[1], &x[2], &x[3], &x[4]); err == nil {
			st = x
		}
	}
	return st, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestConsumerCrash kills SQS consumer processes at their kill points: in the handler with the
// inbox transaction open (before the commit), and at the delete request after the inbox
// commit. Each run publishes events through a relay and the SQS sink to a FIFO queue, runs a
// consumer process to its kill point, then one that must apply everything; the check, over
// every run: each committed event's effect applied exactly once (lost = 0, no second apply of
// a redelivered message: the inbox), and first applies in version order per key. A kill
// before the commit applies nothing (the transaction dies with the process); a kill before the
// delete leaves committed messages that come back after the visibility timeout and are
// recognised as duplicates. OUTBOXKIT_CRASH_RUNS=N runs each case N times (default 2).
func TestConsumerCrash(t *testing.T) {
	t.Parallel()
	ep := testkit.Need(t, testkit.AWSEndpoint)
	runs := crashRuns(t)
	points := []string{pointBeforeCommit, pointBeforeDelete}
	results := make([]consumerCrashResult, len(points))
	var wg sync.WaitGroup
	for i, point := range points {
		ctx := t.Context()
		dir := t.TempDir()
		path, h := effectsDB(t, dir)
		client := sqsClient(ep)
		q, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(randomName("okc-") + ".fifo"),
			Attributes: map[string]string{"FifoQueue": "true"}})
		require.NoError(t, err)
		queueURL := aws.ToString(q.QueueUrl)
		t.Cleanup(func() {
			_, _ = client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)})
		})
		sink, err := sqs.New(client, &sqs.Options{Logger: quiet})
		require.NoError(t, err)
		out := memoryDB(t, 8)
		wg.Go(func() {
			results[i] = consumerCrashRun(ctx, out, recording(sink), h, dir, crashSpec{
				DB: childDB{Kind: "sqlite", Name: path}, Point: point, Queue: queueURL, Endpoint: ep,
			}, runs, consumerCase{
				dest:   queueURL,
				killAt: func(run, events int) int { return 1 + run%3 + events/10 },
				settle: func(context.Context) bool {
					// Let the redelivered messages of the kill come back and be recognised.
					time.Sleep(crashVisibility + time.Second)
					return true
				},
			})
		})
	}
	wg.Wait()
	for i, point := range points {
		t.Run(point, func(t *testing.T) {
			res := results[i]
			t.Logf("%d runs, %d SIGKILLs; %s (deliveries: effects applied); killed processes received %d, applied %d, duplicate %d, failed %d, deleted %d; the next ones received %d, applied %d, duplicate %d, failed %d, deleted %d; took %v",
				res.runs, res.kills, res.report, res.stats[0][0], res.stats[0][1], res.stats[0][2], res.stats[0][3], res.stats[0][4],
				res.stats[1][0], res.stats[1][1], res.stats[1][2], res.stats[1][3], res.stats[1][4], res.took.Round(time.Millisecond))
			require.Empty(t, res.errs)
			require.Equal(t, runs, res.runs)
			require.Zero(t, res.report.Lost, "lost: a committed event never applied")
			require.Zero(t, res.report.Unknown, "applied but never committed")
			require.Zero(t, res.report.Duplicates, "an effect applied twice")
			require.Zero(t, res.report.OrderBreaks, "first applies in version order per key")
		})
	}
}

// effectsDB creates the SQLite file of a consumer case's inbox in dir, migrated, with its
// effects table (one row per effect, n in apply order).
func effectsDB(t *testing.T, dir string) (string, *sql.DB) {
	ctx := t.Context()
	path := filepath.Join(dir, "inbox.db")
	h, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	s, err := sqlite.New(h, &sqlite.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	_, err = h.ExecContext(ctx, "CREATE TABLE effects (n INTEGER PRIMARY KEY, id TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL)")
	require.NoError(t, err)
	return path, h
}

// consumerCase is what differs between the SQS and the Kafka consumer cases.
type consumerCase struct {
	dest string // the relay's destination: the queue or the topic
	// killAt is the kill point's N (crashSpec.N) of a run that committed events events.
	killAt func(run, events int) int
	// settle waits, once every effect is applied, until the process that applied the rest
	// has also seen again what the killed one left unacknowledged; false: not within its
	// bound.
	settle func(ctx context.Context) bool
	// companion, when set, is the spec of a process started beside the first one once that
	// one applied something (it makes the kill point's rebalance), and killed with the next
	// one; before, when set, runs before each run's first process.
	companion func(sp crashSpec) crashSpec
	before    func(ctx context.Context) error
}

type consumerCrashResult struct {
	runs, kills int
	// stats sums, over the runs, the last stats of the killed processes ([0]) and of the
	// processes that applied the rest ([1]): received, applied, duplicate, failed, deleted.
	stats  [2][5]int
	report report
	took   time.Duration
	errs   []string
}

// consumerCrashRun runs one consumer case runs times; it does not touch a *testing.T.
func consumerCrashRun(ctx context.Context, out db, sink *recorder, inbox *sql.DB, dir string, sp crashSpec, runs int, cc consumerCase) (res consumerCrashResult) {
	began := time.Now()
	defer func() { res.took = time.Since(began) }()
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		res.errs = append(res.errs, fmt.Sprintf(format, args...))
	}
	relay, err := core.NewRelay(out.relayStore(nil, ""), sink, core.StaticRouter{Default: cc.dest}, &core.RelayOptions{
		PollInterval: 20 * time.Millisecond, BatchSize: 10, Logger: quiet,
	})
	if err != nil {
		fail("new relay: %v", err)
		return res
	}
	rctx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	defer func() { stopRelay(); <-relayDone }()

	var all []committed
	for run := range runs {
		// Publish this run's events (keys of their own: versions count from 1 per producer).
		prod := produceKeys(ctx, out, fmt.Sprintf("r%dk", run), 4, 20*time.Millisecond, fail)
		time.Sleep(600 * time.Millisecond)
		prod.stop()
		evs := prod.committed()
		if _, ok := waitDelivered(ctx, sink, evs, 30*time.Second); !ok {
			fail("run %d: the relay did not publish %d events within 30 s", run, len(evs))
			return res
		}
		all = append(all, evs...)
		sp.N = cc.killAt(run, len(evs))
		sp.Log = filepath.Join(dir, fmt.Sprintf("a%d.log", run))
		start := func(sp crashSpec) (*proc, bool) {
			p, err := startProc(sp)
			if err != nil {
				fail("run %d: %v", run, err)
				return nil, false
			}
			return p, true
		}
		if cc.before != nil {
			if err := cc.before(ctx); err != nil {
				fail("run %d: %v", run, err)
				return res
			}
		}
		a, ok := start(sp)
		if !ok {
			return res
		}
		var c *proc // the companion
		var cspec crashSpec
		defer func() { c.kill() }()
		if cc.companion != nil {
			cspec = cc.companion(sp)
			cspec.Log = filepath.Join(dir, fmt.Sprintf("c%d.log", run))
			if !waitLog(ctx, sp.Log, func(l string) bool {
				var x [5]int
				_, err := fmt.Sscanf(l, "stats %d %d %d %d %d", &x[0], &x[1], &x[2], &x[3], &x[4])
				return err == nil && x[1] > 0
			}, 30*time.Second) {
				a.kill()
				fail("run %d: the consumer process applied nothing within 30 s", run)
				return res
			}
			if c, ok = start(cspec); !ok {
				a.kill()
				return res
			}
		}
		select {
		case <-a.exited:
		case <-time.After(30 * time.Second):
			a.kill()
			fail("run %d: the consumer process did not reach its kill point within 30 s", run)
			return res
		}
		if !a.killedBySIGKILL() {
			fail("run %d: the consumer process ended with %v, not at its kill point", run, a.cmd.ProcessState)
			return res
		}
		plain := sp
		plain.Point = pointNone
		plain.Log = filepath.Join(dir, fmt.Sprintf("b%d.log", run))
		b, ok := start(plain)
		if !ok {
			return res
		}
		applied := func() map[string]bool {
			got := map[string]bool{}
			rows, err := inbox.QueryContext(ctx, "SELECT id FROM effects")
			if err != nil {
				return got
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if rows.Scan(&id) == nil {
					got[id] = true
				}
			}
			return got
		}
		done := false
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
			got := applied()
			done = true
			for _, ev := range all {
				done = done && got[ev.id]
			}
			if done {
				break
			}
		}
		settled := done && cc.settle(ctx)
		b.kill()
		res.kills += 2
		logs := []string{sp.Log, plain.Log}
		if c != nil {
			c.kill()
			res.kills++
			logs = append(logs, cspec.Log)
		}
		for j, log := range logs {
			i := min(j, 1) // the companion counts with the next process
			st, err := consumerStats(log)
			if err != nil {
				fail("run %d: %v", run, err)
				return res
			}
			for k := range st {
				res.stats[i][k] += st[k]
			}
			if j == 1 && (sp.Point == pointBeforeDelete || sp.Point == pointBeforeOffsetCommit || sp.Point == pointBeforeAck) && st[2] == 0 {
				// The batch whose delete, offset commit or ack the kill stopped had
				// committed in the inbox: it comes back.
				fail("run %d: the next consumer process saw no duplicate", run)
			}
		}
		if !done {
			fail("run %d: not every event applied within 30 s", run)
		} else if !settled {
			fail("run %d: the next consumer process did not settle", run)
		}
		rep, err := effectsReport(ctx, inbox, all)
		if err != nil {
			fail("run %d: %v", run, err)
			return res
		}
		res.report = rep
		if !done {
			return res
		}
		res.runs++
	}
	return res
}

// effectsReport checks the effects table (in apply order) against what was committed.
func effectsReport(ctx context.Context, h *sql.DB, evs []committed) (report, error) {
	rows, err := h.QueryContext(ctx, "SELECT id, key, version FROM effects ORDER BY n")
	if err != nil {
		return report{}, err
	}
	defer rows.Close()
	rec := newRecorder(0)
	for rows.Next() {
		var d delivery
		if err := rows.Scan(&d.id, &d.key, &d.version); err != nil {
			return report{}, err
		}
		rec.got = append(rec.got, d)
	}
	if err := rows.Err(); err != nil {
		return report{}, err
	}
	return rec.check(evs), nil
}
