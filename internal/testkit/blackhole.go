package testkit

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// BlackHole is a TCP proxy to an upstream for liveness tests: a peer that stops answering and
// leaves its socket open (a hung broker, a black-holed route). Until Swallow it forwards
// every connection both ways. Swallow turns every connection, open or opened later, into a black
// hole: what the client sends is read and dropped, nothing reaches it, and its connection is
// never closed, not even when the upstream closes its side. Restore makes the connections
// opened afterwards forward again; the swallowed ones stay black holes (their requests are lost,
// as with a peer that hung), so only a client that bounds its requests and reconnects recovers.
//
// toxiproxy's timeout toxic is no substitute here: it passes the upstream's close on to the
// client, so the upstream's own idle timeouts would end the hang.
type BlackHole struct {
	ln       net.Listener
	upstream string
	holed    atomic.Bool
	accepted atomic.Int64

	mu     sync.Mutex
	conns  []*bhConn
	closed bool
}

type bhConn struct {
	client, up net.Conn
	holed      atomic.Bool
}

// NewBlackHole starts a proxy to upstream (host:port) on a free loopback port; it stops, closing
// every connection, when tb's test ends.
func NewBlackHole(tb testing.TB, upstream string) *BlackHole {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &BlackHole{ln: ln, upstream: upstream}
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// Addr is the proxy's address (host:port).
func (p *BlackHole) Addr() string { return p.ln.Addr().String() }

// Accepted counts the connections accepted so far.
func (p *BlackHole) Accepted() int64 { return p.accepted.Load() }

// Swallow turns every connection, open or new, into a black hole.
func (p *BlackHole) Swallow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holed.Store(true)
	for _, c := range p.conns {
		c.holed.Store(true)
	}
}

// Restore makes new connections forward again; those swallowed stay black holes.
func (p *BlackHole) Restore() { p.holed.Store(false) }

func (p *BlackHole) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		c := &bhConn{client: client}
		if !p.holed.Load() {
			if c.up, err = net.Dial("tcp", p.upstream); err != nil {
				_ = client.Close()
				continue
			}
		} else {
			c.holed.Store(true)
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.closeAll()
			return
		}
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go c.pump(c.client, c.up)
		if c.up != nil {
			go c.pump(c.up, c.client)
		}
	}
}

// pump copies from to to until from fails; once the connection is swallowed it drops what it
// reads, and it never closes the client's side (the proxy's close does).
func (c *bhConn) pump(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !c.holed.Load() && to != nil {
			if _, werr := to.Write(buf[:n]); werr != nil && !c.holed.Load() {
				c.closeAll()
				return
			}
		}
		if err != nil {
			if !c.holed.Load() {
				c.closeAll() // passed on, as any proxy does, until swallowed
			}
			return
		}
	}
}

func (c *bhConn) closeAll() {
	_ = c.client.Close()
	if c.up != nil {
		_ = c.up.Close()
	}
}

func (p *BlackHole) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.closeAll()
	}
}
