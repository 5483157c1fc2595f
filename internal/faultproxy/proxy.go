// Package faultproxy is a TCP proxy for tests that breaks links on demand: cut every connection,
// black-hole them (stop forwarding while keeping them open), refuse new ones, or delay traffic.
// It listens on loopback only.
//
// A stall is a black hole as a dead network path is one: the proxy stops reading, and its small
// receive buffers fill at once, so the sender's bytes stay unacknowledged in the sender's own
// socket. What the proxy had already acknowledged before it stopped is forwarded after Resume,
// even if the sender has meanwhile reset the connection: acknowledged bytes are never lost.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its own address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[*pair]struct{}
	stalled bool
	refuse  bool
	delay   time.Duration
	resume  chan struct{} // closed when a stall ends
	closed  bool
	wg      sync.WaitGroup
	accepts int
}

// readBuffer is the proxy's socket receive buffer: small, so that a stall acknowledges little,
// and not under the loopback MSS (64 KiB), below which the window reopens only by probes.
const readBuffer = 64 << 10

type pair struct {
	client, server net.Conn
	running        int           // directions still forwarding
	gone           chan struct{} // closed when the pair is torn down
}

// New starts a proxy on a free loopback port forwarding to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*pair]struct{}{}, resume: make(chan struct{})}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is how many connections the proxy has let through.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse || p.closed
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		for _, conn := range []net.Conn{c, s} {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(readBuffer)
			}
		}
		pr := &pair{client: c, server: s, running: 2, gone: make(chan struct{})}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.accepts++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(pr, c, s)
		go p.pipe(pr, s, c)
	}
}

// pipe forwards one direction until its source ends, then half-closes the destination: what was
// read is always delivered, and the other direction goes on until it ends too. A destination
// that fails is not written again, but its source is still read to the end (see discard).
func (p *Proxy) pipe(pr *pair, from, to net.Conn) {
	defer p.wg.Done()
	defer p.halfDone(pr, to)
	buf := make([]byte, 32<<10)
	for {
		if !p.flowing(pr) { // a stalled link reads nothing more
			return
		}
		n, err := from.Read(buf)
		if n > 0 {
			if !p.flowing(pr) { // a stall that began during the read holds these bytes
				return
			}
			p.mu.Lock()
			delay := p.delay
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				discard(from, buf)
				return
			}
		}
		if err != nil {
			return // io.EOF, a reset, or a Cut
		}
	}
}

// discard reads from until it ends, once its destination is gone. Closing a socket with
// unread bytes resets it and drops what it still had to send, so the proxy reads its sources to
// the end: the other direction's bytes, already acknowledged to their sender, still go out.
func discard(from net.Conn, buf []byte) {
	for {
		if _, err := from.Read(buf); err != nil {
			return
		}
	}
}

// flowing waits while the proxy is stalled; false when the pair was torn down meanwhile.
func (p *Proxy) flowing(pr *pair) bool {
	p.mu.Lock()
	resume := p.resume
	p.mu.Unlock()
	select {
	case <-resume:
		return true
	case <-pr.gone:
		return false
	}
}

// halfDone ends one direction: the destination sees the end of the stream after everything
// forwarded. The pair is closed once both directions have ended.
func (p *Proxy) halfDone(pr *pair, to net.Conn) {
	if tc, ok := to.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	p.mu.Lock()
	pr.running--
	last := pr.running == 0
	p.mu.Unlock()
	if last {
		p.drop(pr)
	}
}

func (p *Proxy) drop(pr *pair) {
	p.mu.Lock()
	_, live := p.conns[pr]
	delete(p.conns, pr)
	p.mu.Unlock()
	if !live {
		return
	}
	close(pr.gone)
	pr.client.Close()
	pr.server.Close()
}

// Cut closes every open connection at once (both sides see the link die, no close frames).
func (p *Proxy) Cut() {
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.conns))
	for pr := range p.conns {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		p.drop(pr)
	}
}

// Stall stops forwarding in both directions while keeping connections open: a black hole.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		p.stalled = true
		p.resume = make(chan struct{})
	}
}

// Resume ends a stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
}

// Refuse makes the proxy close new connections at once (the server looks down).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Delay adds latency to every forwarded read.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Close stops the proxy and all its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Resume()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
