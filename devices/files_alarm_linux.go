//go:build linux

package devices

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// alarm is what a PacedSource sleeps on until its next block is due. On Linux it is a timerfd
// waited for in the runtime's network poller rather than a runtime timer: the runtime wakes its
// monitor thread (sysmon) at every expiring timer and waits for timers in whole milliseconds (a
// second wake-up just short of the deadline). Its two system calls never block (the descriptor
// is non-blocking) and are made raw, because an ordinary system call wakes a sleeping sysmon
// too. A block then costs one wake-up instead of about five.
type alarm struct {
	fd   int
	file *os.File        // the same descriptor, in the poller; closed when collected
	raw  syscall.RawConn // file's, to wait for readiness
	buf  [8]byte

	// read is the poller's callback for one wait, made once (by the first wait, when the alarm
	// has its place) so that a wait allocates nothing; readErr is what it saw. due is what the
	// wait is for: the callback's first call arms the timer for it and waits without reading,
	// as the timer cannot have expired yet (a read would only find EAGAIN: one system call a
	// block for nothing). It arms the timer there, not before the wait: the poller forgets any
	// readiness it saw when a wait begins (RawRead resets it before its first call), and an
	// expiry it saw in between would be forgotten, with no new edge to come. reads counts the
	// read calls; beforePoll, when set, runs just before a wait begins (tests).
	read       func(fd uintptr) bool
	readErr    error
	due        time.Duration
	reads      int
	beforePoll func()

	// ctx is the context the waits are cut short by: its end sets a read deadline in the past
	// (stop undoes that). It is registered once, not at every wait: a reader keeps its context.
	ctx  context.Context
	stop func() bool
}

func newAlarm() alarm {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return alarm{fd: -1}
	}
	file := os.NewFile(uintptr(fd), "paced-source-timerfd")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return alarm{fd: -1}
	}
	return alarm{fd: fd, file: file, raw: raw}
}

// arm sets the timer to expire once after d (0 disarms it).
func (a *alarm) arm(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	_, _, errno := unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(a.fd), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// expired waits in the poller until the timer has expired (or a deadline cuts the wait short).
func (a *alarm) expired() error {
	if a.read == nil {
		a.read = func(fd uintptr) bool {
			if d := a.due; d > 0 {
				// The poller reports the expiry (edge-triggered), however soon it comes.
				a.due = 0
				if err := a.arm(d); err != nil {
					a.readErr = err
					return true
				}
				return false
			}
			a.reads++
			_, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&a.buf[0])), uintptr(len(a.buf)))
			if errno == unix.EAGAIN {
				return false // not yet: wait for readiness
			}
			if errno != 0 {
				a.readErr = errno
			}
			return true
		}
	}
	a.readErr = nil
	if a.beforePoll != nil {
		a.beforePoll()
	}
	if err := a.raw.Read(a.read); err != nil {
		return err
	}
	return a.readErr
}

// wait sleeps for d or until ctx ends (ctx.Err()). It may return early with nil: the caller
// checks the time again.
func (a *alarm) wait(ctx context.Context, d time.Duration) error {
	if a.file == nil {
		return Sleep(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	if ctx != a.ctx {
		if a.stop != nil {
			a.stop()
		}
		// A deadline left by an earlier context's end must not cut these waits short.
		if err := a.file.SetReadDeadline(time.Time{}); err != nil {
			return Sleep(ctx, d)
		}
		file := a.file
		a.ctx, a.stop = ctx, context.AfterFunc(ctx, func() { file.SetReadDeadline(time.Unix(1, 0)) })
	}
	a.due = d
	err := a.expired()
	a.due = 0 // not armed when the wait ended before its first call (a deadline)
	if err := ctx.Err(); err != nil {
		a.arm(0) // disarmed: no stale expiry later
		return err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// An earlier context's end, reported late: clear it; the caller checks the time again.
		return a.file.SetReadDeadline(time.Time{})
	}
	if err != nil {
		return Sleep(ctx, d) // cannot happen with a timerfd (arming or reading it); a timer still paces
	}
	return nil
}
