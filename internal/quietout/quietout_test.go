package quietout

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ordinaryCount stands for the ordinary write and counts the bytes that went that way.
type ordinaryCount struct {
	w     io.Writer
	mu    sync.Mutex
	bytes int
}

func (o *ordinaryCount) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.bytes += len(p)
	o.mu.Unlock()
	return o.w.Write(p)
}

func (o *ordinaryCount) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bytes
}

// lines are the test's writes: short lines, and one longer than a pipe's atomic write.
func lines() [][]byte {
	var out [][]byte
	for i := range 200 {
		out = append(out, fmt.Appendf(nil, "%02d:00:00 state listening session sess_%d\n", i%24, i))
	}
	out = append(out, []byte(strings.Repeat("x", 10000)+"\n"))
	return out
}

// quietly writes every line through a Writer for f (whose ordinary way is counted) while read
// drains the other end, and returns what arrived and how many bytes went the ordinary way.
func quietly(t *testing.T, f *os.File, all [][]byte, read func(ordinary *ordinaryCount) ([]byte, error)) (got []byte, ordinary int) {
	t.Helper()
	w := New(f)
	count := &ordinaryCount{w: f}
	w.out = count
	done := make(chan []byte)
	go func() {
		b, err := read(count)
		if err != nil {
			t.Error(err)
		}
		done <- b
	}()
	for _, l := range all {
		if n, err := w.Write(l); n != len(l) || err != nil {
			t.Fatalf("Write: %d of %d bytes, %v", n, len(l), err)
		}
	}
	f.Close()
	return <-done, count.count()
}

func want() []byte { return bytes.Join(lines(), nil) }

func TestPipe(t *testing.T) {
	r, wf, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, ordinary := quietly(t, wf, lines(), func(*ordinaryCount) ([]byte, error) { return io.ReadAll(r) })
	if !bytes.Equal(got, want()) {
		t.Fatalf("the reader got %d bytes, not the %d written in order", len(got), len(want()))
	}
	// Only the line longer than an atomic pipe write may go the ordinary way.
	if runtime.GOOS == "linux" && ordinary > 10001 {
		t.Errorf("%d bytes went the ordinary way; only the 10001-byte line may", ordinary)
	}
	t.Logf("%d of %d bytes the ordinary way", ordinary, len(got))
}

// A pipe nobody reads fills: the writes that find no room wait in the ordinary write (the
// goroutine blocks, not the runtime), and complete, in order, once the reader drains it.
func TestFullPipe(t *testing.T) {
	r, wf, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var all [][]byte
	for range 20 {
		all = append(all, lines()...)
	}
	got, ordinary := quietly(t, wf, all, func(ordinary *ordinaryCount) ([]byte, error) {
		for deadline := time.Now().Add(10 * time.Second); ordinary.count() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("no write went the ordinary way in 10 s")
			}
		}
		return io.ReadAll(r)
	})
	if !bytes.Equal(got, bytes.Join(all, nil)) {
		t.Fatalf("the reader got %d bytes, not the %d written in order", len(got), len(bytes.Join(all, nil)))
	}
	t.Logf("%d of %d bytes the ordinary way", ordinary, len(got))
}

func TestSocket(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.(*net.UnixConn).File() // a blocking descriptor, as systemd hands stdout over
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	defer peer.Close()
	got, ordinary := quietly(t, f, lines(), func(*ordinaryCount) ([]byte, error) { return io.ReadAll(peer) })
	if !bytes.Equal(got, want()) {
		t.Fatalf("the reader got %d bytes, not the %d written in order", len(got), len(want()))
	}
	if runtime.GOOS == "linux" && ordinary != 0 {
		t.Errorf("%d bytes went the ordinary way to a socket with room", ordinary)
	}
}

// A file is written the ordinary way.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	quietly(t, f, lines(), func(*ordinaryCount) ([]byte, error) { return nil, nil })
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want()) {
		t.Fatalf("the file holds %d bytes, not the %d written in order", len(b), len(want()))
	}
}

// OwnPipe writes everything, however large and however slowly the reader drains the pipe, in
// order, with no ordinary write at all; a pipe whose reader is gone is an error (EPIPE), not a
// signal; anything but a pipe is refused.
func TestOwnPipe(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("OwnPipe is Linux's only")
	}
	r, wf, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	w, ok := OwnPipe(wf)
	if !ok {
		t.Fatal("OwnPipe refused a pipe")
	}
	var all []byte
	for i := range 12 {
		all = append(all, bytes.Repeat([]byte{byte('a' + i)}, 100_000+i)...)
	}
	done := make(chan []byte)
	go func() {
		var got []byte
		buf := make([]byte, 7000)
		for len(got) < len(all) {
			time.Sleep(time.Millisecond) // slower than the writer: the pipe fills again and again
			n, err := r.Read(buf)
			if err != nil {
				break
			}
			got = append(got, buf[:n]...)
		}
		done <- got
	}()
	for p := all; len(p) > 0; p = p[min(len(p), 300_000):] {
		chunk := p[:min(len(p), 300_000)]
		if n, err := w.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write: %d of %d bytes, %v", n, len(chunk), err)
		}
	}
	if got := <-done; !bytes.Equal(got, all) {
		t.Fatalf("the reader got %d bytes, not the %d written in order", len(got), len(all))
	}
	r.Close()
	if _, err := w.Write([]byte("gone")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("a write after the reader closed: %v, want EPIPE", err)
	}

	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := OwnPipe(f); ok {
		t.Error("OwnPipe took a regular file")
	}
}
