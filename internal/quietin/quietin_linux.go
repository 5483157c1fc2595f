//go:build linux

package quietin

import (
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"
)

type raw struct {
	name string
	rc   syscall.RawConn
	p    []byte // the read under way's buffer (one read at a time, as for any io.Reader)
	n    int
	errn syscall.Errno
	read func(fd uintptr) bool
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
	r := &raw{name: f.Name(), rc: rc}
	r.read = func(fd uintptr) bool {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case syscall.EAGAIN:
			return false // wait in the poller
		case syscall.EINTR:
			return r.read(fd)
		}
		r.n, r.errn = int(n), e
		return true
	}
	return r
}

func (r *raw) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	err := r.rc.Read(r.read)
	r.p = nil
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, err
	case err != nil: // the poller's only other answer: the file is closed
		return 0, &os.PathError{Op: "read", Path: r.name, Err: os.ErrClosed}
	case r.errn != 0:
		return 0, r.errn
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}
