package reliability_test

// Consumer kill points of the crash matrix for the Kafka consumer: consumer processes (this
// test binary run again, see TestMain) killed in the handler with the inbox transaction open
// (mid-batch), or after an inbox commit and before the offset commit.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// pointBeforeOffsetCommit is the Kafka consumer's kill point between its two commits: SIGKILL
// as the Nth inbox transaction returns, committed, before the consumer commits the offsets of
// its records (every CommitInterval, after the batch is done). The Kafka consumer's other
// kill point is pointBeforeCommit, taken mid-batch: SIGKILL in the first handler call from the
// Nth on that is not the first of its inbox transaction.
const pointBeforeOffsetCommit = "before_offset_commit"

// pointDuringRebalance: SIGKILL 0–300 ms after the Kafka consumer process, once it applied
// something, sends a JoinGroup request: in the rebalance that a second member joining the
// group started (the join, the sync, the revoke of the partitions it hands over and its
// commit, its rejoin), its workers mid-stream (its handler takes 30 ms a record).
const pointDuringRebalance = "during_rebalance"

// kafkaCrashPartitions is the partition count of a Kafka consumer case's topic.
const kafkaCrashPartitions = 4

// kafkaConsumerChild runs a Kafka consumer process until it is killed: the group is
// sp.Topic+"-g", with the static member ID "crash" (the next process takes the killed one's
// partitions over at once instead of after its session timeout); its inbox and its effects
// table are in the SQLite file sp.DB.Name; the handler inserts one effects row per record in
// the inbox transaction. Small batches and a short commit interval make each kill cut into
// the middle of the stream.
func kafkaConsumerChild(ctx context.Context, sp crashSpec) error {
	h, err := sqlite.OpenDB(ctx, sp.DB.Name)
	if err != nil {
		return err
	}
	s, err := sqlite.New(h, &sqlite.Options{Logger: quiet})
	if err != nil {
		return err
	}
	var store driver.InboxStore[*sql.Tx] = s
	member := sp.Member
	if member == "" {
		member = "crash"
	}
	var hooks []kgo.Opt
	var c *kafka.Consumer[*sql.Tx]
	switch sp.Point {
	case pointNone, pointBeforeCommit:
	case pointDuringRebalance:
		hooks = append(hooks, kgo.WithHooks(&joinSignal{armed: func() bool { return c.Stats().Applied > 0 }}))
	case pointBeforeOffsetCommit:
		store = &commitSignal{Store: s, n: int64(sp.N)}
	default:
		return fmt.Errorf("unknown kill point %q", sp.Point)
	}
	inbox, err := core.NewInbox(ctx, store, nil)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	handled, perTx := 0, map[*sql.Tx]int{}
	handler := func(ctx context.Context, tx *sql.Tx, d *kafka.Delivery) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (id, key, version) VALUES (?, ?, ?)",
			d.Event.ID, d.Event.AggregateID, d.Event.AggregateVersion)
		if sp.Point == pointDuringRebalance {
			time.Sleep(30 * time.Millisecond) // still at work when the second member joins
		}
		if sp.Point == pointBeforeCommit {
			mu.Lock()
			handled++
			perTx[tx]++
			hit := handled >= sp.N && perTx[tx] >= 2 // an earlier effect of tx is in it
			mu.Unlock()
			if hit {
				testkit.SignalSelf(syscall.SIGKILL)
			}
		}
		return err
	}
	c, err = kafka.NewConsumer(sp.Topic+"-g", []string{sp.Topic}, inbox, "crash", handler, &kafka.ConsumerOptions{
		ClientOptions: append([]kgo.Opt{kgo.SeedBrokers(strings.Split(sp.Brokers, ",")...), kgo.InstanceID(member),
			kgo.FetchMaxWait(200 * time.Millisecond),
			kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond)}, hooks...),
		MaxPollRecords: 20, MaxBatch: 5, CommitInterval: 200 * time.Millisecond, Logger: quiet,
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
			_, _ = fmt.Fprintf(logf, "stats %d %d %d %d %d\n", st.Received, st.Applied, st.Duplicate, st.Failed, st.Commits)
		}
	}()
	return c.Run(ctx)
}

// commitSignal is a Kafka consumer process's inbox store that SIGKILLs the process as its nth
// transaction returns committed. It embeds the adapter's store, so the inbox still sees its
// batch statements (driver.InboxBatchStore).
type commitSignal struct {
	*sqlite.Store
	n       int64
	commits atomic.Int64
}

func (s *commitSignal) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	err := s.Store.InTx(ctx, fn)
	if err == nil && s.commits.Add(1) == s.n {
		testkit.SignalSelf(syscall.SIGKILL)
	}
	return err
}

// joinSignal is a Kafka client hook that SIGKILLs the process 0–300 ms after it writes a
// JoinGroup request once armed reports true (its first joins are its own).
type joinSignal struct {
	armed func() bool
	once  sync.Once
}

func (j *joinSignal) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.JoinGroup) && j.armed() {
		j.once.Do(func() {
			go func() {
				time.Sleep(rand.N(300 * time.Millisecond))
				testkit.SignalSelf(syscall.SIGKILL)
			}()
		})
	}
}

// caughtUp waits up to bound until group has committed, on every partition of topic that
// has records, the end offset: its consumer processed everything there is.
func caughtUp(ctx context.Context, adm *kadm.Client, group, topic string, bound time.Duration) bool {
	for deadline := time.Now().Add(bound); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil || ends.Error() != nil {
			continue
		}
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil || offs.Error() != nil {
			continue
		}
		ok := true
		ends.Each(func(end kadm.ListedOffset) {
			at, found := offs.Lookup(topic, end.Partition)
			ok = ok && (end.Offset == 0 || found && at.At >= end.Offset)
		})
		if ok {
			return true
		}
	}
	return false
}

// TestKafkaConsumerCrash kills Kafka consumer processes at their kill points: in the handler
// with the inbox transaction open, mid-batch (pointBeforeCommit), and as an inbox transaction
// returns committed, before the offsets of its records are committed
// (pointBeforeOffsetCommit). Each run publishes events of four keys through a relay and the
// Kafka sink to a topic of kafkaCrashPartitions partitions, runs a consumer process to its
// kill point, then one (the same static group member) that must apply everything and commit
// the end offsets; the check, over every run: each committed event's effect applied exactly
// once (lost = 0, no second apply of a record consumed again: the inbox), and first applies
// in version order per key. A kill mid-batch applies nothing of the batch (the transaction
// dies with the process); a kill before the offset commit leaves records applied whose
// offsets were not committed: the next process consumes them again and must see them as
// duplicates. OUTBOXKIT_CRASH_RUNS=N runs each case N times (default 2).
func TestKafkaConsumerCrash(t *testing.T) {
	t.Parallel()
	brokers := testkit.Need(t, testkit.KafkaBrokers)
	runs := crashRuns(t)
	ctx := t.Context()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	sink, err := kafka.New(cl, &kafka.Options{Logger: quiet})
	require.NoError(t, err)
	points := []string{pointBeforeCommit, pointBeforeOffsetCommit, pointDuringRebalance}
	killAt := map[string]func(run, events int) int{
		pointBeforeCommit:       func(run, events int) int { return 1 + run%3 + events/10 }, // handler call
		pointBeforeOffsetCommit: func(run, events int) int { return 2 + run%3 + events/20 }, // inbox transaction (of up to 5 records)
		pointDuringRebalance:    func(int, int) int { return 0 },                            // unused
	}
	results := make([]consumerCrashResult, len(points))
	var wg sync.WaitGroup
	for i, point := range points {
		dir := t.TempDir()
		path, h := effectsDB(t, dir)
		topic := randomName("okc-")
		created, err := adm.CreateTopic(ctx, kafkaCrashPartitions, 1, nil, topic)
		require.NoError(t, err)
		require.NoError(t, created.Err)
		t.Cleanup(func() { _, _ = adm.DeleteTopic(context.Background(), topic) })
		out := memoryDB(t, 8)
		cc := consumerCase{
			dest:   topic,
			killAt: killAt[point],
			settle: func(ctx context.Context) bool {
				ok := caughtUp(ctx, adm, topic+"-g", topic, 30*time.Second)
				time.Sleep(200 * time.Millisecond) // its last stats line
				return ok
			},
		}
		if point == pointDuringRebalance {
			// A second member joins once the first applied something; the killed one's
			// replacement (the same static member) then joins the rebalance. The previous
			// run's second member, killed, is removed from the group first.
			cc.companion = func(sp crashSpec) crashSpec {
				sp.Point, sp.Member = pointNone, "crash2"
				return sp
			}
			cc.before = func(ctx context.Context) error {
				_, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(topic+"-g").InstanceIDs("crash2"))
				if errors.Is(err, kerr.GroupIDNotFound) {
					return nil // the first run
				}
				return err
			}
		}
		wg.Go(func() {
			results[i] = consumerCrashRun(ctx, out, recording(sink), h, dir, crashSpec{
				DB: childDB{Kind: "sqlite", Name: path}, Point: point, Topic: topic, Brokers: brokers,
			}, runs, cc)
		})
	}
	wg.Wait()
	for i, point := range points {
		t.Run(point, func(t *testing.T) {
			res := results[i]
			t.Logf("%d runs, %d SIGKILLs; %s (deliveries: effects applied); killed processes received %d, applied %d, duplicate %d, failed %d, offset commits %d; the next ones received %d, applied %d, duplicate %d, failed %d, offset commits %d; took %v",
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
