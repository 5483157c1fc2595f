//go:build linux

package quiettimer

import (
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/omnisat/omnisat/internal/counterwait"
)

type impl struct {
	file     *os.File      // the timerfd, in the poller; nil when the runtime timer stands in
	fallback *runtimeTimer // when no timerfd could be made
	done     chan struct{} // closed when the waiting goroutine has ended

	// The descriptor is set through rc.Control, which holds it open for the call: a Reset
	// racing Close must not set a descriptor number the process has given to something else.
	mu    sync.Mutex
	rc    syscall.RawConn
	spec  unix.ItimerSpec
	setFn func(fd uintptr) // made once, so that a Reset allocates nothing
}

func (t *impl) start(fire func()) {
	t.done = make(chan struct{})
	if fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err == nil {
		t.file = os.NewFile(uintptr(fd), "quiettimer")
		if t.rc, err = t.file.SyscallConn(); err != nil {
			t.file.Close()
			t.file = nil
		}
	}
	if t.file == nil {
		t.fallback = newRuntimeTimer(fire)
		return
	}
	t.setFn = t.set
	wait := counterwait.Waiter(t.file)
	go func() {
		defer close(t.done)
		for wait() == nil { // an error: the descriptor is closed
			fire()
		}
	}()
}

// set is a raw call: timerfd_settime never blocks, and an ordinary system call would wake a
// sleeping sysmon.
func (t *impl) set(fd uintptr) {
	unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&t.spec)), 0, 0, 0)
}

// arm makes the timerfd expire after d (0 disarms it); nothing once the timer is closed.
func (t *impl) arm(d time.Duration) {
	t.mu.Lock()
	t.spec = unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	_ = t.rc.Control(t.setFn) // fails only when closed
	t.mu.Unlock()
}

func (t *impl) reset(d time.Duration) {
	if t.fallback != nil {
		t.fallback.reset(d)
		return
	}
	t.arm(max(d, time.Nanosecond)) // a zero value would disarm it
}

func (t *impl) stop() {
	if t.fallback != nil {
		t.fallback.stop()
		return
	}
	t.arm(0)
}

func (t *impl) close() {
	if t.fallback != nil {
		t.fallback.close()
		return
	}
	t.file.Close() // ends the waiting goroutine
	<-t.done
}
