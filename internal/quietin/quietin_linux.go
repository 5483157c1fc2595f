//go:build linux

package quietin

import (
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// RawRead reads a non-blocking descriptor in the runtime's poller with raw read calls, for one
// reader at a time. Its poller callback is made once (Bind), so that a read allocates nothing;
// a RawRead must not be copied after Bind. The realtime package's sockets read through it too.
type RawRead struct {
	rc    syscall.RawConn
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// Bind makes r read rc.
func (r *RawRead) Bind(rc syscall.RawConn) {
	r.rc, r.fn = rc, r.read
}

// read is the poller's callback: false while the descriptor has nothing to read.
func (r *RawRead) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // nothing yet: wait for readiness
		}
		r.n, r.errno = int(n), e
		return true
	}
}

// Read reads into p, which must not be empty: the bytes read (0 at the end of the stream) and
// the read's error number, or the poller's error (the descriptor closed, a deadline passed).
func (r *RawRead) Read(p []byte) (int, syscall.Errno, error) {
	r.p, r.n, r.errno = p, 0, 0
	err := r.rc.Read(r.fn)
	n, errno := r.n, r.errno
	r.p = nil
	return n, errno, err
}

type raw struct {
	name string
	rd   RawRead
}

// rawReader is nil when f's descriptor is not non-blocking: a raw read could then block the
// thread without the scheduler knowing.
func rawReader(f *os.File) io.Reader {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	nonblocking := false
	if rc.Control(func(fd uintptr) {
		flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = e == 0 && flags&syscall.O_NONBLOCK != 0
	}) != nil || !nonblocking {
		return nil
	}
	r := &raw{name: f.Name()}
	r.rd.Bind(rc)
	return r
}

func (r *raw) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := r.rd.Read(p)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, err
	case err != nil: // the poller's only other answer: the file is closed
		return 0, &os.PathError{Op: "read", Path: r.name, Err: os.ErrClosed}
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
