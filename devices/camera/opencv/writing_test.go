package opencv

import (
	"context"
	"errors"
	"image"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/devices/camera"
)

// rawFD is f's descriptor, left non-blocking as os.Pipe makes it (File.Fd would make it
// blocking): as the camera program's pipe is.
func rawFD(t *testing.T, f *os.File) int {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// OpenWriting: the grabber's thread writes the stream itself, an up message and then the
// frames, which never pass through Go; a reader that goes away ends the session, and the loss
// says why (EPIPE).
func TestOpenWritingWritesTheStreamItself(t *testing.T) {
	path := makeVideo(t, filepath.Join(t.TempDir(), "cam.mp4"), 640, 480, 30, 5)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	defer pr.Close()
	if err := camera.NewStreamWriter(pw).Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenWriting(context.Background(), camera.Config{Source: "file:" + path}, -1, nil, nil); err == nil {
		t.Fatal("OpenWriting to no output: no error")
	}
	states := newStateLog()
	c, err := OpenWriting(context.Background(), camera.Config{Source: "file:" + path, MaxEdge: 320, EncodeFPS: 10,
		Retry: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond}, rawFD(t, pw), states.on, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})

	r := camera.NewStreamReader(pr, 1<<20)
	if m, err := r.Next(); err != nil || m.Kind != camera.MsgUp {
		t.Fatalf("first message %q, %v; want up", m.Kind, err)
	}
	for i := range 3 {
		m, err := r.Next()
		if err != nil || m.Kind != camera.MsgFrame {
			t.Fatalf("message %d: %q, %v; want a frame", i+2, m.Kind, err)
		}
		if got := decodeJPEG(t, m.Frame).Bounds(); got != image.Rect(0, 0, 320, 240) {
			t.Fatalf("frame %d is %v, want 320x240", i+1, got)
		}
	}
	if err := states.waitFor(t, 1, 10*time.Second); err != nil {
		t.Fatalf("first state: %v, want up", err)
	}
	if _, ok := c.Latest(); ok {
		t.Error("Latest has a frame: the frames went through Go")
	}
	select {
	case <-c.Updated():
		t.Error("Updated has a token: the frames went through Go")
	default:
	}

	pr.Close()
	err = states.waitFor(t, 2, 10*time.Second)
	if err == nil || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("second state: %v, want lost with EPIPE", err)
	}
}
