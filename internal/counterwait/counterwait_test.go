//go:build linux

package counterwait

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaiter: the wait returns once the counter is bumped (not before), clears it, allocates
// nothing, and fails once the file is closed.
func TestWaiter(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "eventfd")
	wait := Waiter(f)
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	bump := func() {
		if _, err := unix.Write(fd, one); err != nil {
			t.Fatal(err)
		}
	}
	returned := make(chan error, 1)
	go func() { returned <- wait() }()
	select {
	case err := <-returned:
		t.Fatalf("returned (%v) before the counter was bumped", err)
	case <-time.After(50 * time.Millisecond):
	}
	bump()
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Read(fd, make([]byte, 8)); err != unix.EAGAIN {
		t.Errorf("the counter was not cleared: read gave %v", err)
	}
	if a := testing.AllocsPerRun(100, func() {
		bump()
		wait()
	}); a != 0 {
		t.Errorf("%v allocations per wait", a)
	}
	go func() { returned <- wait() }()
	f.Close()
	if err := <-returned; err == nil {
		t.Error("a wait on a closed file returned no error")
	}
}
