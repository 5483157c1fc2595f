// Package quietout writes a service's console lines without waking the Go runtime's monitor
// thread. An ordinary write is a blocking-style system call: when the runtime's monitor
// (sysmon) sleeps, as it does in a process that is idle between events, the call wakes it, and
// it then naps and checks a few times before it sleeps again. For a satellite that prints a
// line every second or two that was two thirds of its wake-ups between audio chunks.
//
// On Linux a line goes out with one raw system call when that call cannot block: on a socket
// (systemd's journal stream) with MSG_DONTWAIT, on a pipe (a supervisor, a test harness) when
// the pipe has room for it. Anything else — a terminal, a file, a full pipe or socket, an
// error — is written the ordinary way, so a slow reader still holds only the goroutine that
// writes, and errors (EPIPE and its signal included) are what they always were.
package quietout

import (
	"io"
	"os"
	"sync"
)

// Writer writes to a file, quietly where it can. Its Write may be called from any goroutine;
// one write at a time.
type Writer struct {
	out io.Writer // the ordinary way: the file itself
	mu  sync.Mutex
	k   kind
	fd  uintptr
}

type kind int

const (
	ordinary kind = iota // a terminal, a file, anything else
	socket
	pipe
)

// New returns a Writer for f (os.Stdout, say). It never fails: what it cannot write quietly
// it writes as f.Write does.
func New(f *os.File) *Writer {
	w := &Writer{out: f}
	// Not f.Fd(): it would put a non-blocking descriptor, shared with whoever started the
	// process, into blocking mode.
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { w.fd, w.k = fd, kindOf(fd) })
	}
	return w
}

var _ io.Writer = (*Writer)(nil)

// Write writes p whole, as f.Write does.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	if len(p) > 0 {
		n = quietWrite(w.k, w.fd, p)
	}
	if n == len(p) {
		return n, nil
	}
	m, err := w.out.Write(p[n:])
	return n + m, err
}
