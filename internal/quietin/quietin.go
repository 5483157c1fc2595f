// Package quietin reads a pipe, a socket or a counter (eventfd, timerfd) without waking the Go
// runtime's monitor thread, as package quietout writes. An ordinary read is a blocking-style
// system call: when the monitor (sysmon) sleeps, as it does in a process idle between events,
// the call wakes it, and it then naps and checks a few times before it sleeps again. The camera
// program's frames came through such reads once a second, two of them a frame (the frame, then
// EAGAIN); package counterwait's waits on device and worker counters read through it too.
//
// On Linux a descriptor in the runtime's poller (non-blocking, as os.Pipe and os.NewFile of a
// non-blocking descriptor make it) is read with a raw read, which cannot block; when nothing
// is there the goroutine waits in the poller as an ordinary read would.
package quietin

import (
	"io"
	"os"
)

// Reader reads f, quietly where it can; it is f itself elsewhere (another OS, a descriptor
// that is not in the poller). Closing f ends a read under way with an error, as for f.
func Reader(f *os.File) io.Reader {
	if r := rawReader(f); r != nil {
		return r
	}
	return f
}
