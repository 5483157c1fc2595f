//go:build linux

package realtime

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/omnisat/omnisat/internal/quietin"
)

// On Linux the session's TCP socket is read and written with raw system calls made from inside
// the poller's readiness callbacks (syscall.RawConn), never with ordinary ones. An ordinary
// system call wakes the runtime's monitor thread (sysmon) when it sleeps, and one that lasts
// longer than ~20 µs (copying an 85 KB audio message) lets that thread hand the processor to
// another thread while the call runs: about ten context switches per message where one is
// needed. The descriptor is non-blocking, so a raw call never blocks; deadlines, Close and the
// poller's waiting work as for net.Conn's own Read and Write.

// socketOf is conn's descriptor for raw calls, nil when conn is not a socket of the kernel's.
func socketOf(conn net.Conn) syscall.RawConn {
	switch conn.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil // a wrapper (tests, proxies) keeps its own Read and Write
	}
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// bindRaw makes the poller's callbacks once, when the conn is made: a closure per call would
// escape to the poller and cost an allocation for every read, write and SIOCOUTQ query.
func (c *countingConn) bindRaw() {
	c.rd.Bind(c.sock)
	c.wr.fn, c.oq.fn = c.wr.write, c.oq.ask
	c.wr.oq, c.wr.written = &c.oq, &c.written
}

// rawRead is the reader's raw reads (package quietin's), kept in the conn (see bindRaw).
type rawRead = quietin.RawRead

// Read reads with a raw system call. Like the WebSocket connection above it, it has one reader
// at a time.
func (c *countingConn) Read(p []byte) (int, error) {
	if c.sock == nil || len(p) == 0 {
		return c.Conn.Read(p)
	}
	n, errno, err := c.rd.Read(p)
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// rawWrite is one raw write's state, kept in the conn with its callback (see bindRaw).
// Writes come one at a time (gorilla/websocket holds its write lock around each, control frames
// included); the mutex makes that a guarantee rather than an assumption.
type rawWrite struct {
	mu    sync.Mutex
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool

	// Each send is counted in written as the kernel takes it, under the query's mutex: a write
	// blocked halfway through a message (a full send buffer, a black-holed link) has part of it
	// in the kernel, and a count made only when the write returns would be short of what the
	// kernel counts as unacknowledged.
	oq      *outq
	written *atomic.Uint64
}

// write is the poller's callback: false while the send buffer is full.
func (w *rawWrite) write(fd uintptr) bool {
	for w.n < len(w.p) {
		w.oq.mu.Lock()
		// MSG_NOSIGNAL: a peer gone is an error to return, never a signal.
		r, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&w.p[w.n])), uintptr(len(w.p)-w.n),
			unix.MSG_NOSIGNAL, 0, 0)
		if e == 0 {
			w.written.Add(uint64(r))
		}
		w.oq.mu.Unlock()
		switch e {
		case 0:
			w.n += int(r)
		case unix.EINTR:
		case unix.EAGAIN:
			return false // the send buffer is full: wait until it has room
		default:
			w.errno = e
			return true
		}
	}
	return true
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.sock == nil {
		n, err := c.Conn.Write(p)
		c.written.Add(uint64(n))
		return n, err
	}
	wr := &c.wr
	wr.mu.Lock()
	wr.p, wr.n, wr.errno = p, 0, 0
	err := c.sock.Write(wr.fn)
	n, errno := wr.n, wr.errno
	wr.p = nil
	wr.mu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError wraps err as net.Conn's own Read and Write do.
func (c *countingConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// outq is the state of one SIOCOUTQ query, kept in the conn with its callback (see bindRaw).
// Its mutex also orders the query against the raw writer's sends (see rawWrite).
type outq struct {
	mu    sync.Mutex
	v     int32
	errno syscall.Errno
	fn    func(fd uintptr)
}

func (q *outq) ask(fd uintptr) {
	_, _, q.errno = unix.RawSyscall(unix.SYS_IOCTL, fd, unix.SIOCOUTQ, uintptr(unsafe.Pointer(&q.v)))
}

// unacked asks the kernel how many bytes written to the socket the peer has not acknowledged
// yet (SIOCOUTQ), with the count of bytes written at that moment: no send falls between the
// two. ok is false when there is no socket or the kernel does not say.
func (c *countingConn) unacked() (written, unacked uint64, ok bool) {
	if c.sock == nil {
		return 0, 0, false
	}
	q := &c.oq
	q.mu.Lock()
	defer q.mu.Unlock()
	q.v, q.errno = 0, 0
	if err := c.sock.Control(q.fn); err != nil || q.errno != 0 || q.v < 0 {
		return 0, 0, false
	}
	return c.written.Load(), uint64(q.v), true
}
