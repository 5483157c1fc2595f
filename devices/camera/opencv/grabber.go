package opencv

/*
#include <stdlib.h>
#include "grabber.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/omnisat/omnisat/internal/counterwait"
)

// grabber is a capture's grab loop on a thread of its own (grabber.cpp). A camera delivers
// frames at its own rate (30 a second, typically) and only a few are encoded (encode_fps, one
// a second by default); every frame is grabbed so that the source's queue never holds stale
// images. Run from Go, every grab was a call into C, and each call into C wakes the Go
// runtime's monitor thread out of its deep sleep, which then naps and checks several times:
// about nine wake-ups per grabbed frame. The thread grabs, paces a file and encodes on its own,
// and Go hears from it once per encoded frame through an eventfd it sleeps on in the runtime's
// poller, reading the result from the thread's memory without calling into C at all.
type grabber struct {
	g        *C.CamGrabber
	loopFile string
	wait     func() error
	fd       *os.File // g.readyfd
}

// startGrabber starts the thread on cp with enc and sched (all three are the thread's until
// free has returned). It stops when stopfd becomes readable. With loopFile (not ""), the
// thread reopens that file when it ends, so that it plays in a loop. With an outfd (not -1)
// it writes the frames there itself (see OpenWriting); next then never returns one.
func startGrabber(cp *capture, enc *Encoder, sched schedule, stopfd int, loopFile string, outfd int) (*grabber, error) {
	var cfile *C.char
	if loopFile != "" {
		cfile = C.CString(loopFile)
		defer C.free(unsafe.Pointer(cfile))
	}
	g := C.cam_grabber_start(cp.p, enc.c, sched.s, C.int(stopfd), cfile, C.int(apiFFmpeg), C.int(outfd))
	if g == nil {
		return nil, errors.New("cannot start the grabber thread")
	}
	fd := os.NewFile(uintptr(g.readyfd), "camera-grabber")
	return &grabber{g: g, loopFile: loopFile, fd: fd, wait: counterwait.Waiter(fd)}, nil
}

// grabEnd is how a grabber's thread ended.
type grabEnd int

const (
	grabRunning      = grabEnd(C.CAM_RUNNING)
	grabStopped      = grabEnd(C.CAM_STOPPED) // told to
	grabNoFrame      = grabEnd(C.CAM_END)     // the end of a file, or the device is gone
	grabFailed       = grabEnd(C.CAM_GRAB_FAILED)
	grabDecodeFailed = grabEnd(C.CAM_DECODE_FAILED)
	grabEncodeFailed = grabEnd(C.CAM_ENCODE_FAILED)
	grabReopenFailed = grabEnd(C.CAM_REOPEN_FAILED)
	grabOutputFailed = grabEnd(C.CAM_OUTPUT_FAILED) // writing to outfd failed
)

// next sleeps until the thread has encoded a frame or ended. It returns the frame (a copy),
// or nil and how the thread ended.
func (gr *grabber) next() ([]byte, grabEnd) {
	for {
		if atomic.LoadInt32((*int32)(unsafe.Pointer(&gr.g.frame_ready))) == 1 {
			b := C.GoBytes(unsafe.Pointer(gr.g.jpeg), C.int(gr.g.size))
			atomic.StoreInt32((*int32)(unsafe.Pointer(&gr.g.frame_ready)), 0)
			return b, grabRunning
		}
		if how := grabEnd(atomic.LoadInt32((*int32)(unsafe.Pointer(&gr.g.ended)))); how != grabRunning {
			return nil, how
		}
		if err := gr.wait(); err != nil { // cannot happen: the file is open until free
			return nil, grabFailed
		}
	}
}

// nextWritten sleeps until the thread has written its first frame to its outfd (and returns
// grabRunning), or until it has ended (and returns how); after the first frame, until it
// ends.
func (gr *grabber) nextWritten() grabEnd {
	first := atomic.LoadInt64((*int64)(unsafe.Pointer(&gr.g.written))) == 0
	for {
		if how := grabEnd(atomic.LoadInt32((*int32)(unsafe.Pointer(&gr.g.ended)))); how != grabRunning {
			return how
		}
		if first && atomic.LoadInt64((*int64)(unsafe.Pointer(&gr.g.written))) > 0 {
			return grabRunning
		}
		if err := gr.wait(); err != nil { // cannot happen: the file is open until free
			return grabFailed
		}
	}
}

// grabbed is how many frames the thread has grabbed from its capture.
func (gr *grabber) grabbed() int64 {
	return atomic.LoadInt64((*int64)(unsafe.Pointer(&gr.g.grabbed)))
}

// err is the thread's message when it ended with an error.
func (gr *grabber) err() string { return C.GoString(&gr.g.err[0]) }

// free waits for the thread to end and releases it. Call it once next has reported the end.
func (gr *grabber) free() {
	C.cam_grabber_free(gr.g)
	gr.fd.Close()
	gr.g = nil
}

// schedule is a grabber's time, kept in C memory from one capture of a session to the next.
type schedule struct{ s *C.CamSchedule }

// newSchedule paces frames at fps (0: not paced) and encodes one every interval.
func newSchedule(fps float64, interval time.Duration) schedule {
	s := (*C.CamSchedule)(C.calloc(1, C.size_t(unsafe.Sizeof(C.CamSchedule{}))))
	if fps > 0 {
		s.pace_ns = C.int64_t(float64(time.Second) / fps)
	}
	s.interval_ns = C.int64_t(interval)
	return schedule{s}
}

func (s schedule) free() { C.free(unsafe.Pointer(s.s)) }

// outputSize is the C twin of jpeg.OutputSize, which the tests hold it to.
func outputSize(w, h, maxEdge int) (int, int) {
	var ow, oh C.int
	C.cam_output_size(C.int(w), C.int(h), C.int(maxEdge), &ow, &oh)
	return int(ow), int(oh)
}

// grabError is the error for a thread that ended with how, for source name.
func (gr *grabber) grabError(how grabEnd, name string) error {
	switch how {
	case grabFailed:
		return fmt.Errorf("read camera %q: %s", name, gr.err())
	case grabDecodeFailed:
		return fmt.Errorf("decode frame from camera %q: %s", name, gr.err())
	case grabEncodeFailed:
		return fmt.Errorf("camera %q: %s", name, gr.err())
	case grabOutputFailed: // as os.File's Write says it, so that errors.Is finds EPIPE
		return fmt.Errorf("camera %q: %w", name, &os.PathError{Op: "write", Path: "the frames' output", Err: syscall.Errno(gr.g.errnum)})
	case grabReopenFailed:
		if n := gr.g.errnum; n != 0 { // as os.Stat says it, so that errors.Is finds the cause
			return fmt.Errorf("reopen camera %q to loop: %w", name, &os.PathError{Op: "stat", Path: gr.loopFile, Err: syscall.Errno(n)})
		}
		return fmt.Errorf("reopen camera %q to loop: %s", name, gr.err())
	}
	return fmt.Errorf("read camera %q: no frame (end of stream, or the device is gone)", name)
}
