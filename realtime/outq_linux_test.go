//go:build linux

package realtime

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// rawLoopback connects a countingConn that reads and writes raw to a peer on loopback, and
// returns it with its TCP connection and the peer (closed when the test ends).
func rawLoopback(t *testing.T) (c *countingConn, raw *net.TCPConn, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c = newCountingConn(conn)
	if c.sock == nil {
		t.Fatal("a TCP connection is not read and written raw")
	}
	peer = <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { peer.Close() })
	return c, conn.(*net.TCPConn), peer
}

// The raw socket path keeps net.Conn's meaning: bytes both ways, partial writes completed when
// the send buffer is full, deadlines as timeouts, EOF at the peer's close, net.ErrClosed after
// our own, and the written count SIOCOUTQ is set against.
func TestRawSocketKeepsConnSemantics(t *testing.T) {
	c, raw, peer := rawLoopback(t)
	raw.SetWriteBuffer(4096) // a full send buffer on the way: several partial writes

	// 1 MB one way while the peer reads slowly: every byte arrives, in order.
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(msg))))
		got <- b
	}()
	if n, err := c.Write(msg); err != nil || n != len(msg) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if b := <-got; string(b) != string(msg) {
		t.Fatalf("the peer got %d bytes, not what was written", len(b))
	}
	if w := c.written.Load(); w != uint64(len(msg)) {
		t.Fatalf("written counts %d, want %d", w, len(msg))
	}
	if _, un, ok := c.unacked(); !ok || un != 0 {
		t.Fatalf("unacked after the peer read everything: %d %v", un, ok)
	}

	// The other way, in pieces.
	go peer.Write([]byte("hello"))
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	// A read of data already there allocates nothing (the poller's callback is made once).
	one := []byte("x")
	if allocs := testing.AllocsPerRun(20, func() {
		if _, err := peer.Write(one); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(buf); err != nil || n != 1 {
			t.Fatalf("read %d, %v", n, err)
		}
	}); allocs != 0 {
		t.Errorf("a raw read costs %.1f allocations, want 0", allocs)
	}
	// Nor does a write, or asking the kernel what the peer has not acknowledged (both once a
	// chunk).
	if allocs := testing.AllocsPerRun(20, func() {
		if _, err := c.Write(one); err != nil {
			t.Fatal(err)
		}
		if n, err := peer.Read(buf); err != nil || n != 1 {
			t.Fatalf("peer read %d, %v", n, err)
		}
		if _, _, ok := c.unacked(); !ok {
			t.Fatal("the kernel did not say what is unacknowledged")
		}
	}); allocs != 0 {
		t.Errorf("a raw write and an unacknowledged count cost %.1f allocations, want 0", allocs)
	}

	// A read deadline is a timeout.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = c.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})

	// The peer's close is EOF.
	peer.Close()
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
	// Writing to a peer gone fails (EPIPE or a reset), without a signal killing the test.
	var werr error
	for range 100 {
		if _, werr = c.Write(msg[:64<<10]); werr != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if werr == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}

	// Our own close: net.ErrClosed.
	c.Close()
	if _, err := c.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
}

// While a write waits halfway through a message (the peer reads nothing), what written and
// unacked say the peer acknowledged is exactly what the peer's kernel holds for it: the part of
// the message already in the kernel is counted, not only whole writes.
func TestAcknowledgedDuringBlockedWrite(t *testing.T) {
	c, raw, peer := rawLoopback(t)
	raw.SetWriteBuffer(16 << 10)

	wrote := make(chan error, 1)
	go func() { _, err := c.Write(make([]byte, 4<<20)); wrote <- err }() // far more than both buffers hold
	// Wait until the link is still: the peer's window is full and the rest waits in the writer.
	// Still for half a second, longer than the peer's longest delayed acknowledgement (200 ms),
	// so that what the peer holds is all acknowledged.
	var written, unacked uint64
	deadline := time.Now().Add(10 * time.Second)
	for still := 0; still < 25; time.Sleep(20 * time.Millisecond) {
		w, u, ok := c.unacked()
		if !ok {
			t.Fatal("the kernel did not say what is unacknowledged")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the link never stood still: written %d, unacked %d", w, u)
		}
		if w == written && u == unacked && u > 0 {
			still++
		} else {
			still = 0
		}
		written, unacked = w, u
	}
	if unacked == 0 {
		t.Fatal("nothing unacknowledged: the write did not wait halfway, the test proves nothing")
	}
	raw.SetLinger(0)
	c.Close() // a reset drops what is unacknowledged; what the peer acknowledged stays readable there
	if err := <-wrote; err == nil {
		t.Fatal("the 4 MB write finished although the peer read nothing")
	}
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.Copy(io.Discard, peer)
	if uint64(got)+unacked != written {
		t.Fatalf("the peer got %d bytes, but written %d - unacked %d says %d", got, written, unacked, int64(written)-int64(unacked))
	}
}
