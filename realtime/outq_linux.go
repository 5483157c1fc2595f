//go:build linux

package realtime

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unackedBytes asks the kernel how many bytes written to conn the peer has not acknowledged yet
// (SIOCOUTQ). ok is false when conn is not a socket or the kernel does not say.
func unackedBytes(conn net.Conn) (n uint64, ok bool) {
	sc, isSock := conn.(syscall.Conn)
	if !isSock {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var v int
	var ioErr error
	if err := raw.Control(func(fd uintptr) { v, ioErr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil || ioErr != nil || v < 0 {
		return 0, false
	}
	return uint64(v), true
}
