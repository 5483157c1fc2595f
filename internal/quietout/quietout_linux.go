//go:build linux

package quietout

import (
	"io"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kindOf tells sockets and pipes from the rest. O_NONBLOCK is never set: the descriptor is
// shared with whoever started the process.
func kindOf(fd uintptr) kind {
	var st unix.Stat_t
	if unix.Fstat(int(fd), &st) != nil {
		return ordinary
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return socket
	case unix.S_IFIFO:
		return pipe
	}
	return ordinary
}

// pipeAtomic is PIPE_BUF: a write of at most this many bytes to a pipe with a free slot
// completes at once and whole.
const pipeAtomic = 4096

// quietWrite writes what it can of p with raw system calls that cannot block, and returns how
// many bytes went; the caller writes the rest the ordinary way.
func quietWrite(k kind, fd uintptr, p []byte) int {
	switch k {
	case socket:
		n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
			unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
		if e != 0 {
			return 0
		}
		return int(n)
	case pipe:
		if len(p) > pipeAtomic {
			return 0
		}
		pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
		var now unix.Timespec
		r, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&now)), 0, 0, 0)
		if e != 0 || r != 1 || pfd.Revents&(unix.POLLOUT|unix.POLLERR|unix.POLLHUP) != unix.POLLOUT {
			return 0 // full, or broken: the ordinary write blocks or says so
		}
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != 0 {
			return 0
		}
		return int(n)
	}
	return 0
}

// ownPipe writes to a pipe this process alone writes to, in non-blocking mode, with raw
// system calls, waiting for room in the runtime's poller.
type ownPipe struct {
	f  *os.File // holds the descriptor (and keeps its finalizer from closing it)
	rc syscall.RawConn
}

// OwnPipe returns a writer for f when f is a pipe that this process alone writes to (a
// supervisor's pipe to a child program, say), and false otherwise. It puts the pipe into
// non-blocking mode — which is why it must be this process's alone — and writes everything,
// however large, with raw system calls, waiting for room in the runtime's poller: no write
// wakes the runtime's monitor thread, where New writes whatever is larger than PIPE_BUF the
// ordinary way. f must stay open while the writer is used.
func OwnPipe(f *os.File) (io.Writer, bool) {
	var fd uintptr
	rc, err := f.SyscallConn()
	if err != nil || rc.Control(func(d uintptr) { fd = d }) != nil || kindOf(fd) != pipe {
		return nil, false
	}
	dup, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, false
	}
	nf := os.NewFile(uintptr(dup), f.Name()) // non-blocking: in the poller
	if rc, err = nf.SyscallConn(); err != nil {
		nf.Close()
		return nil, false
	}
	return &ownPipe{f: nf, rc: rc}, true
}

func (w *ownPipe) Write(p []byte) (int, error) {
	done := 0
	var werr error
	err := w.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[done])), uintptr(len(p)-done))
			switch e {
			case 0:
				done += int(n)
			case unix.EAGAIN:
				return false // full: wait for room in the poller
			case unix.EINTR:
			default:
				werr = e
				return true
			}
		}
		return true
	})
	if werr == nil {
		werr = err
	}
	if werr != nil {
		werr = &os.PathError{Op: "write", Path: w.f.Name(), Err: werr}
	}
	return done, werr
}
