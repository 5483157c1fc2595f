//go:build linux

// Package counterwait sleeps on an eventfd or timerfd counter in the Go runtime's network poller
// without ever telling the scheduler it enters a system call. An ordinary read is a
// blocking-style call: when the runtime's monitor thread (sysmon) sleeps, as it does in a process
// idle between device buffers, the call wakes it, and it then naps and checks a few times. A raw
// read of a non-blocking counter never blocks, so the wait costs the one wake-up the poller
// needs.
package counterwait

import (
	"os"
	"syscall"
	"unsafe"
)

// Waiter returns a function that sleeps until f's counter is non-zero, then clears it; it
// returns an error only once f is closed. f must be non-blocking (os.NewFile then puts it in
// the poller). The function allocates nothing and is for one goroutine at a time.
func Waiter(f *os.File) (func() error, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var count [8]byte
	read := func(fd uintptr) bool {
		_, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&count[0])), uintptr(len(count)))
		return errno != syscall.EAGAIN // done unless nothing was there yet
	}
	return func() error { return rc.Read(read) }, nil
}
