package realtime

import (
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// What Send accepted is not "sent" until the peer's TCP stack has acknowledged it: on a
// black-holed link the kernel's send buffer keeps tens of seconds of audio that never arrive.
// The session keeps that buffer to about two media chunks and follows each written chunk until
// the peer has acknowledged its last byte, so that at the end it can say exactly what the peer
// never got (Closed.Undelivered) and reset the connection so that none of it arrives later.

// minSendBuffer is the smallest socket send buffer the session asks for. The kernel doubles the
// value (Linux), so the buffer holds about two chunks of the largest media message written.
const minSendBuffer = 32 << 10

// countingConn counts the bytes handed to the kernel, TLS and WebSocket framing included, so
// that they can be set against the kernel's count of unacknowledged bytes. Where sock is set
// (a kernel socket on Linux) it reads and writes with raw system calls (outq_linux.go).
type countingConn struct {
	net.Conn
	sock    syscall.RawConn
	written atomic.Uint64
	rd      rawRead  // the one reader's state (gorilla/websocket reads from one goroutine)
	wr      rawWrite // the writer's
	oq      outq     // the unacknowledged-bytes query's
}

func newCountingConn(c net.Conn) *countingConn {
	cc := &countingConn{Conn: c, sock: socketOf(c)}
	cc.bindRaw()
	return cc
}

// writtenChunk is a media chunk the writer handed to the kernel; end is the byte count on the
// wire once its last byte was written.
type writtenChunk struct {
	id  uint64
	end uint64
	at  time.Time
}

// deliveryTracker follows written media chunks until the peer has acknowledged them. It is not
// safe for concurrent use (the session's mutex guards it).
type deliveryTracker struct {
	pending   []writtenChunk // oldest first
	delivered uint64
}

func (t *deliveryTracker) written(id, end uint64, at time.Time) {
	t.pending = append(t.pending, writtenChunk{id: id, end: end, at: at})
}

// settle counts as delivered the chunks whose every byte is within the first acked bytes.
func (t *deliveryTracker) settle(acked uint64) {
	n := 0
	for n < len(t.pending) && t.pending[n].end <= acked {
		n++
	}
	t.drop(n)
}

// settleByAge is the fallback where the kernel does not tell: a chunk written longer ago than
// the dead-link timeout on a link still alive counts as delivered.
func (t *deliveryTracker) settleByAge(before time.Time) {
	n := 0
	for n < len(t.pending) && t.pending[n].at.Before(before) {
		n++
	}
	t.drop(n)
}

func (t *deliveryTracker) drop(n int) {
	t.delivered += uint64(n)
	t.pending = append(t.pending[:0], t.pending[n:]...)
}

// settleNow updates t from the kernel's view of wire's socket (or by age where it has none) and
// returns how many bytes written the peer has not acknowledged (known false: the kernel does not
// say).
func (t *deliveryTracker) settleNow(wire *countingConn, deadLink time.Duration) (unacked uint64, known bool) {
	if wire == nil {
		return 0, false
	}
	if written, unacked, ok := wire.unacked(); ok {
		t.settle(written - min(unacked, written))
		return unacked, true
	}
	t.settleByAge(time.Now().Add(-deadLink))
	return 0, false
}
