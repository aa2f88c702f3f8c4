package capacity

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// ChildEnv is the environment variable that makes a test binary serve a Broker (ServeChild)
// instead of running its tests: "P50,P99,UPSTREAM" (durations as time.ParseDuration reads them).
const ChildEnv = "OUTBOXKIT_CAPACITY_BROKER"

// MaybeServeChild serves a Broker and exits when ChildEnv is set (call it first in TestMain);
// otherwise it returns at once.
func MaybeServeChild() {
	spec := os.Getenv(ChildEnv)
	if spec == "" {
		return
	}
	if err := serveChild(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "capacity broker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveChild listens on a free loopback port, writes "http://ADDR\n" to out and serves until
// in is closed (the parent exited or closed the pipe).
func serveChild(spec string, in io.Reader, out io.Writer) error {
	parts := strings.SplitN(spec, ",", 3)
	if len(parts) != 3 {
		return fmt.Errorf("%s=%q: want P50,P99,UPSTREAM", ChildEnv, spec)
	}
	var lat Latency
	var err error
	if lat.P50, err = time.ParseDuration(parts[0]); err != nil {
		return err
	}
	if lat.P99, err = time.ParseDuration(parts[1]); err != nil {
		return err
	}
	b, err := NewBroker(lat, parts[2], uint64(time.Now().UnixNano()))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	if _, err := fmt.Fprintf(out, "http://%s\n", ln.Addr()); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	return srv.Close()
}

// StartChild runs this test binary again as a Broker process (its TestMain must call
// MaybeServeChild) and returns its endpoint; the process stops when tb's test ends.
func StartChild(tb testing.TB, lat Latency, upstream string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%s", ChildEnv, lat.P50, lat.P99, upstream))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("capacity broker did not start: %v", err)
	}
	return strings.TrimSpace(line)
}
