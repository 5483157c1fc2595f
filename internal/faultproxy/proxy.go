// Package faultproxy is a TCP proxy for tests that breaks links on demand: cut every connection,
// black-hole them (stop forwarding while keeping them open), refuse new ones, or delay traffic.
// It listens on loopback only.
package faultproxy

import (
	"errors"
	"io"
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

type pair struct{ client, server net.Conn }

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
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.accepts++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(pr, c, s)
		go p.pipe(pr, s, c)
	}
}

func (p *Proxy) pipe(pr *pair, from, to net.Conn) {
	defer p.wg.Done()
	defer p.drop(pr)
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resume, delay := p.resume, p.delay
			p.mu.Unlock()
			<-resume // a stall holds the bytes (and everything after them)
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

func (p *Proxy) drop(pr *pair) {
	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
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
