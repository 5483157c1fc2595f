//go:build linux

package devices

import (
	"context"
	"testing"
	"time"
)

// A file microphone wakes once a block and hands the block over; the wait allocates nothing
// (it built a callback and its error variable at every block).
func TestPacedSourceWaitAllocatesNothing(t *testing.T) {
	src := NewPacedSource(make([]float32, 1600), 16000, true, 1)
	src.SetPeriod(time.Millisecond)
	buf := make([]float32, 16)
	ctx := context.Background()
	if allocs := testing.AllocsPerRun(50, func() {
		if _, err := src.Read(ctx, buf); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("a paced Read allocates %.1f times, want 0", allocs)
	}
}
