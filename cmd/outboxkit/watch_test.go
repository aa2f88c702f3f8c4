package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/opendb"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStatusWatch, on each database: status --watch --output json prints one status a line
// until its context ends (exit status 0); once pending falls, the lines carry the drain rate
// and the time to empty.
func TestStatusWatch(t *testing.T) {
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			ok(t, append([]string{"migrate", "--lanes", "1"}, d.flags...)...)
			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			writeEvents(t, db.Store, "a", "b", "c")

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var out, errs syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, append([]string{"status", "--watch", "--interval", "20ms", "--output", "json"}, d.flags...), &out, &errs)
			}()
			lines := func() []statusReport {
				var rs []statusReport
				for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					var r statusReport
					if json.Unmarshal([]byte(l), &r) == nil {
						rs = append(rs, r)
					}
				}
				return rs
			}
			require.Eventually(t, func() bool { return len(lines()) >= 2 }, 10*time.Second, 10*time.Millisecond)
			first := lines()[0]
			require.Equal(t, int64(3), first.Pending)
			require.Nil(t, first.DrainRate, "one look gives no rate")
			publishAll(t, db.Store)
			require.Eventually(t, func() bool {
				rs := lines()
				last := rs[len(rs)-1]
				return last.Pending == 0 && last.DrainRate != nil && *last.DrainRate > 0 && last.DrainETA != nil && *last.DrainETA == 0
			}, 10*time.Second, 10*time.Millisecond, out.String())
			cancel()
			select {
			case code := <-done:
				require.Equal(t, 0, code, errs.String())
			case <-time.After(10 * time.Second):
				t.Fatal("status --watch did not stop when its context ended")
			}
			require.Empty(t, errs.String())
		})
	}
}

// The built binary: status --watch on a pipe prints plain lines and stops on SIGINT with exit
// status 0; a too short --interval is bad usage.
func TestStatusWatchBinary(t *testing.T) {
	t.Parallel()
	d := opsSQLite(t)
	ok(t, append([]string{"migrate"}, d.flags...)...)
	cmd := exec.Command(daemonBinary(t), append([]string{"status", "--watch", "--interval", "20ms"}, d.flags...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errb syncBuffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+Z pending=0 parked=0 blocked=0 oldest_age=0s rate=(unknown|0\.0/s) eta=(unknown|none)$`)
	for i := range 3 {
		require.True(t, sc.Scan(), "line %d: %v %s", i, sc.Err(), errb.String())
		require.Regexp(t, line, sc.Text())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	for sc.Scan() { // drain what it printed before it stopped
	}
	require.NoError(t, cmd.Wait(), errb.String())
	require.Empty(t, errb.String())
	fails(t, 2, "--interval", append([]string{"status", "--watch", "--interval", "1ms"}, d.flags...)...)
}

// On a terminal, status --watch redraws the screen on every look (cursor home, clear) with a
// header, the status, the drain line and, once a backlog was seen, a progress bar toward empty
// that fills as the backlog drains. The built binary's standard output is a pseudo-terminal.
func TestStatusWatchTerminal(t *testing.T) {
	t.Parallel()
	d := opsSQLite(t)
	ok(t, append([]string{"migrate", "--lanes", "1"}, d.flags...)...)
	db, err := opendb.Open(t.Context(), d.cfg)
	require.NoError(t, err)
	defer db.Close()
	writeEvents(t, db.Store, "a", "b", "c")

	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	cmd := exec.Command(daemonBinary(t), append([]string{"status", "--watch", "--interval", "20ms"}, d.flags...)...)
	cmd.Stdout = tty
	var errb syncBuffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	require.NoError(t, tty.Close()) // the child holds it
	var screen syncBuffer
	go func() { _, _ = io.Copy(&screen, ptmx) }() // ends when ptmx is closed or the child exits

	const clear = "\x1b[H\x1b[2J"
	header := regexp.MustCompile(`outboxkit status  \d{4}-\d\d-\d\dT\S+Z  \(every 20ms; Ctrl-C stops\)`)
	require.Eventually(t, func() bool {
		s := screen.String()
		return strings.Count(s, clear) >= 2 && header.MatchString(s) &&
			strings.Contains(s, "progress   [........................................] 0 of 3 sent")
	}, 10*time.Second, 10*time.Millisecond, "%q", screen.String())
	// Every redraw starts with the clear: the screen shows one status at a time.
	frames := strings.Split(screen.String(), clear)
	require.Empty(t, strings.TrimSpace(frames[0]), "nothing before the first clear")
	publishAll(t, db.Store)
	require.Eventually(t, func() bool {
		s := screen.String()
		last := s[strings.LastIndex(s, clear):]
		return strings.Contains(last, "progress   [########################################] 3 of 3 sent") &&
			regexp.MustCompile(`drain      rate=\d+\.\d/s eta=0s`).MatchString(last)
	}, 10*time.Second, 10*time.Millisecond, "%q", screen.String())
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), errb.String())
	require.Empty(t, errb.String())
}
