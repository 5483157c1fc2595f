package agent

import (
	"context"
	"testing"
)

// A live session's queue holds a chunk at a time: pushing and popping it must reuse the queue's
// array rather than allocate one per chunk; a long backlog drains in order and lets its array go.
func TestBacklogReusesItsArray(t *testing.T) {
	b := newBacklog(1 << 20)
	ctx := context.Background()
	audio := make([]float32, 160)
	if allocs := testing.AllocsPerRun(100, func() {
		b.push(chunk{seq: 1, audio: audio})
		if c, ok := b.pop(ctx); !ok || c.seq != 1 {
			t.Fatalf("pop: %v %v", c.seq, ok)
		}
	}); allocs != 0 {
		t.Errorf("push and pop of one chunk cost %.1f allocations, want 0", allocs)
	}

	const n = 3 * keptQueueCap
	for i := range n {
		b.push(chunk{seq: uint64(i), audio: audio})
	}
	for i := range n {
		c, ok := b.pop(ctx)
		if !ok || c.seq != uint64(i) {
			t.Fatalf("pop %d: got seq %d, %v", i, c.seq, ok)
		}
	}
	if b.samples != 0 {
		t.Fatalf("%d samples counted in an empty queue", b.samples)
	}
}
