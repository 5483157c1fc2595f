//go:build linux

package quietout

import (
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
