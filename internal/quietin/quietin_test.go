package quietin

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
	"time"
)

// A pipe read through the Reader gives what was written, in pieces as it comes, then io.EOF
// once the writer is closed.
func TestPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	qr := Reader(r)
	if runtime.GOOS == "linux" && qr == io.Reader(r) {
		t.Fatal("a pipe is read the ordinary way")
	}
	want := bytes.Repeat([]byte("frame "), 30000) // more than a pipe holds: the reader waits
	go func() {
		for p := want; len(p) > 0; p = p[min(len(p), 7000):] {
			w.Write(p[:min(len(p), 7000)])
			time.Sleep(time.Millisecond)
		}
		w.Close()
	}()
	got, err := io.ReadAll(qr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
}

// Closing the file ends a read that waits for data, with the file's error.
func TestCloseEndsAWaitingRead(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	qr := Reader(r)
	done := make(chan error, 1)
	go func() {
		_, err := qr.Read(make([]byte, 16))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the read returned (%v) with nothing written", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("read after Close: %v, want os.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not return after Close")
	}
}

// A file that is not in the poller (a regular file: blocking) is read the ordinary way.
func TestBlockingFileIsReadAsIs(t *testing.T) {
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if Reader(f) != io.Reader(f) {
		t.Error("a regular file got the raw reader")
	}
}
