//go:build linux

// Package counterwait sleeps on an eventfd or timerfd counter in the Go runtime's network poller
// without ever telling the scheduler it enters a system call. An ordinary read is a
// blocking-style call: when the runtime's monitor thread (sysmon) sleeps, as it does in a process
// idle between device buffers, the call wakes it, and it then naps and checks a few times. A raw
// read of a non-blocking counter never blocks, so the wait costs the one wake-up the poller
// needs. The reads are package quietin's.
package counterwait

import (
	"os"

	"github.com/omnisat/omnisat/internal/quietin"
)

// Waiter returns a function that sleeps until f's counter is non-zero, then clears it; it
// returns an error only once f is closed. f must be non-blocking (os.NewFile then puts it in
// the poller). The function allocates nothing and is for one goroutine at a time.
func Waiter(f *os.File) func() error {
	r := quietin.Reader(f)
	var count [8]byte
	return func() error {
		_, err := r.Read(count[:])
		return err
	}
}
