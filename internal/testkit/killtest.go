package testkit

// Tests of relay processes: a test re-executes its own binary as a relay process (StartChild,
// KillMain) whose sink appends the messages it acknowledges to a file (FileSink), kills it, and
// checks what the file received against what was committed (ReadDeliveries). RunKill SIGKILLs
// CDC relay processes at random moments (the adapters' CDC SIGKILL tests); a child reaches a
// chosen kill point itself by wrapping its sink (SignalSink: before or after the Nth send) or
// its store (SettleSignal: during the Nth settle), as internal/reliability's crash matrix of
// polling relays does.

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// KillMain is the TestMain of a package with a SIGKILL test: when env is set, the binary is a relay
// process and runs child(spec) until it is killed (exit 1 when it returns an error); otherwise
// it runs the tests.
func KillMain(m *testing.M, env string, child func(spec string) error) {
	if spec := os.Getenv(env); spec != "" {
		if err := child(spec); err != nil {
			fmt.Fprintln(os.Stderr, "relay process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// KillRelay runs, in a relay process, a CDC relay on store and src that publishes to a FileSink on
// out, with 20-record batches and otherwise the default options (a 30 s lease: the next process
// takes over at once only through the store's Liveness), until the process is killed.
func KillRelay(ctx context.Context, store driver.CDCStore, src driver.ChangeSource, out string) error {
	sink, err := FileSink(out)
	if err != nil {
		return err
	}
	relay, err := core.NewCDCRelay(store, src, sink, core.StaticRouter{Default: "file"}, &core.CDCOptions{
		BatchSize: 20, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	return relay.Run(ctx)
}

// FileSink is the relay process's sink: each acknowledged message is a line "id key" appended
// to path (the page cache survives the process's SIGKILL, so a line written is an
// acknowledgement). Each batch is one write that begins with a newline: a SIGKILL can cut a
// write short at a page boundary, and the next process's first line must not be glued to
// the cut one (a torn "ab" followed by "cd k1" read as an event "abcd" that was never
// committed: seen once as "4001 of 4000 delivered").
func FileSink(path string) (core.Sink, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		var b strings.Builder
		b.WriteByte('\n')
		for _, m := range msgs {
			fmt.Fprintf(&b, "%s %s\n", m.ID, m.PartitionKey)
		}
		if _, err := f.WriteString(b.String()); err != nil {
			return core.Outcomes(len(msgs), err)
		}
		return make([]error, len(msgs))
	}), nil
}

// KillOptions is one SIGKILL test.
type KillOptions struct {
	// ChildEnv is set to ChildSpec in the relay processes' environment; the test binary's
	// TestMain runs the relay when it is set.
	ChildEnv, ChildSpec string
	// Out is the file the relay processes' FileSink appends to.
	Out string
	// Write commits one transaction of two events of key and returns their IDs in order
	// (testkit.Writer).
	Write func(ctx context.Context, key string) ([]string, error)
	// Transactions is how many transactions the producer commits, 4 ms apart. Default 2000.
	Transactions int
	// Kills is how many relay processes are killed. Default 6.
	Kills int
	// MaxResent bounds the duplicates of one kill: what a relay may have sent and not yet
	// checkpointed.
	MaxResent int
	// MaxResume bounds each resume time: from a SIGKILL to the first delivery of the process
	// started right after it (process start, connections, taking the lanes over, resuming
	// the log). Default 5 s.
	MaxResume time.Duration
}

// Run produces while relay processes are killed and restarted, then checks that every event was
// delivered, first deliveries in write order per key, and at most Kills*MaxResent duplicates.
func RunKill(t *testing.T, o KillOptions) {
	t.Helper()
	if o.Transactions == 0 {
		o.Transactions = 2000
	}
	if o.Kills == 0 {
		o.Kills = 6
	}
	if o.MaxResume == 0 {
		o.MaxResume = 5 * time.Second
	}
	ctx := t.Context()
	want := map[string][]string{}
	var mu sync.Mutex
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range o.Transactions {
			key := fmt.Sprintf("k%d", i%20)
			ids, err := o.Write(ctx, key)
			if err != nil {
				t.Errorf("producer: %v", err)
				return
			}
			mu.Lock()
			want[key] = append(want[key], ids...)
			mu.Unlock()
			time.Sleep(4 * time.Millisecond)
		}
	}()

	start := func() *exec.Cmd {
		cmd, err := StartChild(o.ChildEnv, o.ChildSpec)
		if err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	size := func() int64 {
		st, err := os.Stat(o.Out)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	var resumes []time.Duration // kill to the next process's first delivery
	var killed time.Time
	for k := range o.Kills {
		before := size()
		cmd := start()
		// Kill it while it delivers: once it has written something, at a random moment.
		grew := time.Now().Add(20 * time.Second)
		for size() == before && time.Now().Before(grew) {
			time.Sleep(5 * time.Millisecond)
		}
		if size() == before {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("relay process %d delivered nothing within 20 s", k)
		}
		if k > 0 {
			resumes = append(resumes, time.Since(killed))
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed = time.Now()
		_ = cmd.Wait()
	}
	slices.Sort(resumes)
	t.Logf("resume times after SIGKILL (kill to the next process's first delivery): %v", resumes)
	if len(resumes) > 0 && resumes[len(resumes)-1] > o.MaxResume {
		t.Errorf("a relay process resumed delivery %v after its predecessor was killed; want at most %v",
			resumes[len(resumes)-1], o.MaxResume)
	}
	final := start()
	defer func() {
		_ = final.Process.Signal(syscall.SIGKILL)
		_ = final.Wait()
	}()
	<-produced
	if t.Failed() {
		return
	}

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	var got []Delivery
	deadline := time.Now().Add(90 * time.Second)
	for {
		var err error
		if got, err = ReadDeliveries(o.Out); err != nil {
			t.Fatal(err)
		}
		if len(distinct(got)) >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	dups := CheckDeliveries(t, want, got)
	t.Logf("%d events, %d deliveries, %d duplicates over %d kills", total, len(got), dups, o.Kills)
	if dups > o.Kills*o.MaxResent {
		t.Fatalf("%d duplicates over %d kills; at most %d per kill may be resent", dups, o.Kills, o.MaxResent)
	}
}

// CheckDeliveries checks the deliveries got (in acknowledgement order) against want (the
// committed IDs of each key in write order): every event delivered, none that was never
// committed, first deliveries in write order per key (a redelivery of an earlier event is a
// duplicate, not a reordering). It returns the number of duplicates.
func CheckDeliveries(t testing.TB, want map[string][]string, got []Delivery) int {
	t.Helper()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	if n := len(distinct(got)); n != total {
		t.Fatalf("events lost: %d of %d delivered", n, total)
	}
	pos := map[string]int{}
	for _, ids := range want {
		for i, id := range ids {
			pos[id] = i
		}
	}
	next := map[string]int{}
	for _, d := range got {
		id, key := d.ID, d.Key
		switch i, ok := pos[id]; {
		case !ok:
			t.Fatalf("event %s delivered but never committed", id)
		case i > next[key]:
			t.Fatalf("key %s: event #%d delivered before #%d", key, i, next[key])
		case i == next[key]:
			next[key]++
		}
	}
	return len(got) - total
}

// StartChild starts this test binary again, running no test, with env=spec in its environment:
// its TestMain (KillMain) makes it a relay process. Its stderr is the test's.
func StartChild(env, spec string) (*exec.Cmd, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+spec)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a relay process: %w", err)
	}
	return cmd, nil
}

// SignalSink wraps a relay process's sink so that the process reaches a kill point by itself:
// at the nth Send (counted over the relay's concurrent sends) it sends sig to its own process,
// before passing the messages to next when before is set (nothing of that send is
// acknowledged), otherwise once next has acknowledged them (the relay has not settled them
// yet). SIGKILL ends the process there; SIGSTOP stalls it there until a SIGCONT (SignalSelf).
func SignalSink(next core.Sink, n int, sig syscall.Signal, before bool) core.Sink {
	var sends atomic.Int64
	return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		hit := sends.Add(1) == int64(n)
		if hit && before {
			SignalSelf(sig)
		}
		out := next.Send(ctx, msgs)
		if hit && !before {
			SignalSelf(sig)
		}
		return out
	})
}

// SettleSignal wraps a relay process's store so that, once its nth Settle has begun, a
// goroutine sends sig to the process after a random delay of up to maxDelay: the settle is cut
// short anywhere from before its first statement to after its commit. The wrapper is a
// driver.RelayStore only: the relay no longer sees the store's optional interfaces (driver.Waker),
// so it polls.
func SettleSignal(store driver.RelayStore, n int, sig syscall.Signal, maxDelay time.Duration) driver.RelayStore {
	return &settleSignal{RelayStore: store, n: int64(n), sig: sig, maxDelay: maxDelay}
}

type settleSignal struct {
	driver.RelayStore
	n        int64
	sig      syscall.Signal
	maxDelay time.Duration
	settles  atomic.Int64
}

func (s *settleSignal) Settle(ctx context.Context, p driver.SettleParams) error {
	if s.settles.Add(1) == s.n {
		go func() {
			time.Sleep(rand.N(s.maxDelay + 1))
			SignalSelf(s.sig)
		}()
	}
	return s.RelayStore.Settle(ctx, p)
}

// SignalSelf sends sig to its own process and returns once the signal took effect: never for
// SIGKILL, and for SIGSTOP once the process has been continued (SIGCONT). The kernel stops or
// kills the other threads a moment after kill(2) returns; without this wait the caller would
// run on past its kill point (a "before the send" kill could still send).
func SignalSelf(sig syscall.Signal) {
	cont := make(chan os.Signal, 1)
	if sig == syscall.SIGSTOP {
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
	}
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		fmt.Fprintln(os.Stderr, "relay process: signal itself:", err)
		os.Exit(2)
	}
	if sig == syscall.SIGSTOP {
		<-cont
		return
	}
	select {} // SIGKILL: the process ends
}

// Stopped reports whether the process pid is stopped by a signal (Linux: state T in
// /proc/pid/stat).
func Stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}

// Delivery is one line of a FileSink's file: a message the sink acknowledged.
type Delivery struct{ ID, Key string }

// ReadDeliveries reads the lines of a FileSink's file in the order they were acknowledged (no
// file yet: none).
func ReadDeliveries(path string) ([]Delivery, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Delivery
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, key, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue // an empty line (FileSink), or one cut short by a kill
		}
		out = append(out, Delivery{id, key})
	}
	return out, sc.Err()
}

func distinct(ds []Delivery) map[string]bool {
	ids := make(map[string]bool, len(ds))
	for _, d := range ds {
		ids[d.ID] = true
	}
	return ids
}
