package postgres

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// killChildEnv makes the test binary a CDC relay process for TestCDCRelaySurvivesSIGKILL:
// "<schema>|<slot>|<output file>".
const killChildEnv = "OUTBOXKIT_CDC_KILL_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(killChildEnv); spec != "" {
		os.Exit(runKillChild(spec))
	}
	os.Exit(m.Run())
}

// runKillChild runs a CDC relay whose sink appends "id key" lines to a file: a line written is
// an acknowledged message (the page cache survives the process's SIGKILL).
func runKillChild(spec string) int {
	parts := strings.SplitN(spec, "|", 3)
	schema, slot, out := parts[0], parts[1], parts[2]
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("OUTBOXKIT_POSTGRES_DSN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = quote(schema)
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	store, err := New(pool, &Options{Schema: schema})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	src, err := store.ChangeSource(&CDCOptions{Slot: slot, SlotBusyTimeout: 10 * time.Second, StandbyTimeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		var b strings.Builder
		for _, m := range msgs {
			fmt.Fprintf(&b, "%s %s\n", m.ID, m.PartitionKey)
		}
		if _, err := f.WriteString(b.String()); err != nil {
			return core.Outcomes(len(msgs), err)
		}
		return make([]error, len(msgs))
	})
	relay, err := core.NewCDCRelay(store, src, sink, core.StaticRouter{Default: "file"}, &core.CDCOptions{
		LeaseTTL: time.Second, BatchSize: 20, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := relay.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "cdc relay:", err)
		return 1
	}
	return 0
}

// A CDC relay process killed with SIGKILL at random moments, and restarted, loses nothing and
// keeps per-key order; only what was in flight at each kill is delivered again.
func TestCDCRelaySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	s, d := migratedStore(t, dbOptions{syncCommit: true}, nil)
	slot := randomName("okt_kill_")
	src, err := s.ChangeSource(&CDCOptions{Slot: slot})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.DropSlot(context.Background()) })
	out := filepath.Join(t.TempDir(), "delivered.txt")
	ctx := t.Context()

	// A steady producer: 2 events per transaction over 20 keys, for about 8 seconds (the
	// relay processes after a kill wait for the dead one's leases to expire, LeaseTTL 1 s).
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	want := map[string][]string{}
	var mu sync.Mutex
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range 2000 {
			key := fmt.Sprintf("k%d", i%20)
			err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				evs, err := ob.Write(ctx, tx,
					core.Event{AggregateType: "order", AggregateID: key, Type: "a", PartitionKey: key},
					core.Event{AggregateType: "order", AggregateID: key, Type: "b", PartitionKey: key})
				if err == nil {
					mu.Lock()
					want[key] = append(want[key], evs[0].ID, evs[1].ID)
					mu.Unlock()
				}
				return err
			})
			if err != nil {
				t.Errorf("producer: %v", err)
				return
			}
			time.Sleep(4 * time.Millisecond)
		}
	}()

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+d.schema+"|"+slot+"|"+out)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	size := func() int64 {
		st, err := os.Stat(out)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	const kills = 6
	for k := range kills {
		before := size()
		cmd := start()
		// Kill it while it delivers: once it has written something, at a random moment.
		grew := time.Now().Add(20 * time.Second)
		for size() == before && time.Now().Before(grew) {
			time.Sleep(5 * time.Millisecond)
		}
		require.Greater(t, size(), before, "relay process %d delivered nothing within 20 s", k)
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}
	final := start()
	defer func() {
		_ = final.Process.Signal(syscall.SIGKILL)
		_ = final.Wait()
	}()
	<-produced

	total := 0
	mu.Lock()
	for _, ids := range want {
		total += len(ids)
	}
	mu.Unlock()
	var acks map[string]int
	var lines []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		acks, lines = readDelivered(t, out)
		if len(acks) >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(t, acks, total, "events lost: %d of %d delivered", len(acks), total)

	// Per key, first deliveries follow write order.
	mu.Lock()
	defer mu.Unlock()
	pos := map[string]int{}
	for _, ids := range want {
		for i, id := range ids {
			pos[id] = i
		}
	}
	next := map[string]int{}
	for _, l := range lines {
		id, key, _ := strings.Cut(l, " ")
		switch i := pos[id]; {
		case i > next[key]:
			t.Fatalf("key %s: event #%d delivered before #%d", key, i, next[key])
		case i == next[key]:
			next[key]++
		}
	}
	dups := len(lines) - total
	t.Logf("%d events, %d deliveries, %d duplicates over %d kills", total, len(lines), dups, kills)
	// What a kill can resend: the batches sent and not yet checkpointed (the reader's, the
	// sender's and the settler's queue of 8), 20 records each.
	require.LessOrEqual(t, dups, kills*12*20)
}

func readDelivered(t *testing.T, path string) (map[string]int, []string) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]int{}, nil
	}
	require.NoError(t, err)
	defer f.Close()
	acks := map[string]int{}
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, " ") {
			continue // a line cut by the kill
		}
		lines = append(lines, l)
		id, _, _ := strings.Cut(l, " ")
		acks[id]++
	}
	require.NoError(t, sc.Err())
	return acks, lines
}
