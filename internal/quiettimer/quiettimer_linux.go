//go:build linux

package quiettimer

import (
	"os"
	"sync"
	"sync/atomic"
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

	// The kernel's timer is moved lazily (see reset): due is when the timer should expire,
	// armed when the timerfd will, both on born's monotonic clock; 0 is never (stopped,
	// disarmed). armed is never later than due.
	born       time.Time
	now        func() time.Duration // since born; tests may stop it
	due, armed time.Duration
	sets       int          // timerfd_settime calls (tests)
	early      atomic.Int64 // expiries that found the timer pushed back or stopped
}

// lazySlack is the fraction of a Reset's duration by which the timerfd may stay early: a
// timer pushed back at every message (a link watchdog) is moved in the kernel once in that
// long, not at every message. The early expiry, if it comes, only re-arms the timerfd.
const lazySlack = 4

func (t *impl) start(fire func()) {
	t.done = make(chan struct{})
	t.born = time.Now()
	t.now = func() time.Duration { return time.Since(t.born) }
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
			if t.expired() {
				fire()
			}
		}
	}()
}

// expired is the timerfd's expiry: whether the timer is due, or else re-arms the timerfd for
// when it is (it was pushed back, or stopped, since the timerfd was set).
func (t *impl) expired() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.armed = 0
	if t.due != 0 && t.due <= now {
		t.due = 0
		return true
	}
	t.early.Add(1)
	if t.due != 0 {
		t.arm(t.due, now)
	}
	return false
}

func (t *impl) earlyWakes() int64 { return t.early.Load() }

// set is a raw call: timerfd_settime never blocks, and an ordinary system call would wake a
// sleeping sysmon.
func (t *impl) set(fd uintptr) {
	unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&t.spec)), 0, 0, 0)
}

// arm sets the timerfd to expire at (on born's clock; now is the time); nothing once the timer
// is closed. Called with mu held.
func (t *impl) arm(at, now time.Duration) {
	t.spec = unix.ItimerSpec{Value: unix.NsecToTimespec(max(at-now, 1).Nanoseconds())} // 0 would disarm it
	if t.rc.Control(t.setFn) == nil {
		t.armed = at
		t.sets++
	}
}

// reset moves the timer to d from now. The timerfd is set only when it would expire later than
// that, or earlier by more than d/lazySlack: pushed back a little at a time, it stays early,
// and its expiry re-arms it (expired) unless it has been pushed back again in time.
func (t *impl) reset(d time.Duration) {
	if t.fallback != nil {
		t.fallback.reset(d)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.due = now + max(d, 1)
	if t.armed == 0 || t.armed > t.due || t.due-t.armed > max(d, 0)/lazySlack {
		t.arm(t.due, now)
	}
}

// stop keeps the timer from firing without a system call: if the timerfd is set, its expiry
// finds nothing due (one wake-up, unless a Reset moves it first).
func (t *impl) stop() {
	if t.fallback != nil {
		t.fallback.stop()
		return
	}
	t.mu.Lock()
	t.due = 0
	t.mu.Unlock()
}

func (t *impl) close() {
	if t.fallback != nil {
		t.fallback.close()
		return
	}
	t.file.Close() // ends the waiting goroutine
	<-t.done
}
