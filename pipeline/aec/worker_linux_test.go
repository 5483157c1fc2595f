package aec

import (
	"runtime"
	"testing"
)

// On Linux speexdsp runs on the processor's own thread: a device buffer through Process makes
// no cgo call from Go (each one wakes the scheduler's monitor and can hand its processor to a
// new thread), and the result is the same as calling speexdsp directly.
func TestProcessMakesNoCgoCall(t *testing.T) {
	cfg := Config{Rate: 48000, EchoCancel: true, Denoise: true}
	onWorker, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer onWorker.Close()
	if onWorker.w == nil {
		t.Fatal("no worker thread started")
	}
	direct, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	direct.stopWorker() // calls speexdsp from Go, as without a worker

	n := 5 * onWorker.FrameSize() // a 50 ms device buffer
	mic, ref := make([]float32, n), make([]float32, n)
	a, b := make([]float32, n), make([]float32, n)
	calls := int64(0)
	for k := range 20 {
		for i := range mic {
			ref[i] = float32((k*n+i)%97-48) / 100
			mic[i] = ref[i]/2 + float32((k*n+i)%13-6)/1000
		}
		before := runtime.NumCgoCall()
		if err := onWorker.Process(a, mic, ref); err != nil {
			t.Fatal(err)
		}
		if k > 0 { // the first grows the C buffers to the batch's size
			calls += runtime.NumCgoCall() - before
		}
		if err := direct.Process(b, mic, ref); err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("buffer %d sample %d: %v on the worker, %v called directly", k, i, a[i], b[i])
			}
		}
	}
	if calls != 0 {
		t.Errorf("19 buffers through Process: %d cgo calls, want 0", calls)
	}
}
