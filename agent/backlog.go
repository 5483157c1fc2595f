package agent

import (
	"context"
	"sync"
	"time"
)

// chunk is one piece of captured media on its way to the server.
type chunk struct {
	seq         uint64
	audio       []float32 // 16 kHz mono
	frames      [][]byte
	forceListen bool
	captured    time.Time // when its last sample was captured
	// epoch is the supervisor's stop epoch when its first sample was captured: a chunk from
	// before a stop is never sent.
	epoch uint64
	// muteEpoch is the mute epoch when its first sample was captured: if the microphone has been
	// muted since, the chunk goes out as silence.
	muteEpoch uint64
}

// backlog is the bounded queue between capture and the sender, ordered by sequence number. When
// it holds more audio than its limit, the oldest chunks are dropped and counted: memory stays
// bounded, and the conversation stays live when the link falls behind or is down.
type backlog struct {
	mu      sync.Mutex
	q       []chunk
	samples int
	limit   int // samples
	ready   chan struct{}

	droppedChunks  uint64
	droppedSamples uint64
	// count says whether trimming is a loss worth counting: not while no session is wanted, when
	// old audio is discarded on purpose.
	count bool
}

func newBacklog(limitSamples int) *backlog {
	return &backlog{limit: limitSamples, ready: make(chan struct{}, 1)}
}

func (b *backlog) signal() {
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// push adds a chunk at the end and returns how many chunks had to be dropped to respect the limit.
func (b *backlog) push(c chunk) int {
	b.mu.Lock()
	b.q = append(b.q, c)
	b.samples += len(c.audio)
	dropped := b.trimLocked()
	b.mu.Unlock()
	b.signal()
	return dropped
}

// requeue puts back chunks that did not reach the server (one the sender could not hand over,
// or those a lost session never acknowledged) in sequence order, each at most once, and returns
// how many had to be dropped to respect the limit (the oldest go first).
func (b *backlog) requeue(cs ...chunk) int {
	b.mu.Lock()
	for _, c := range cs {
		i := len(b.q)
		for i > 0 && b.q[i-1].seq > c.seq {
			i--
		}
		if i > 0 && b.q[i-1].seq == c.seq {
			continue // already queued
		}
		b.q = append(b.q, chunk{})
		copy(b.q[i+1:], b.q[i:])
		b.q[i] = c
		b.samples += len(c.audio)
	}
	dropped := b.trimLocked()
	b.mu.Unlock()
	b.signal()
	return dropped
}

// setLimit changes the bound and applies it at once.
func (b *backlog) setLimit(samples int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limit = samples
	return b.trimLocked()
}

func (b *backlog) trimLocked() int {
	n := 0
	for b.samples > b.limit && len(b.q) > 0 {
		old := b.popFrontLocked()
		if b.count {
			b.droppedChunks++
			b.droppedSamples += uint64(len(old.audio))
			n++
		}
	}
	if len(b.q) == 0 && cap(b.q) > keptQueueCap {
		b.q = nil // let a long queue's array go
	}
	return n
}

// keptQueueCap is the largest array an empty queue keeps: a live session's queue holds a chunk
// or two, and reusing its array spares an allocation per chunk.
const keptQueueCap = 16

// popFrontLocked removes and returns the oldest chunk. A short queue moves the rest to the
// front, so that its array is reused instead of regrown as chunks come and go; a long one (a
// backlog draining after a reconnect) is resliced, so that draining it stays linear.
func (b *backlog) popFrontLocked() chunk {
	c := b.q[0]
	if len(b.q) <= keptQueueCap {
		n := copy(b.q, b.q[1:])
		b.q[n] = chunk{}
		b.q = b.q[:n]
	} else {
		b.q[0] = chunk{}
		b.q = b.q[1:]
	}
	b.samples -= len(c.audio)
	return c
}

// drop counts a chunk the sender discarded as too old to be worth sending.
func (b *backlog) drop(c chunk) {
	b.mu.Lock()
	b.droppedChunks++
	b.droppedSamples += uint64(len(c.audio))
	b.mu.Unlock()
}

// clear discards everything queued on purpose (not counted).
func (b *backlog) clear() {
	b.mu.Lock()
	clear(b.q)
	b.q, b.samples = nil, 0
	b.mu.Unlock()
}

func (b *backlog) counting(on bool) {
	b.mu.Lock()
	b.count = on
	b.mu.Unlock()
}

// pop waits for the oldest chunk.
func (b *backlog) pop(ctx context.Context) (chunk, bool) {
	for {
		b.mu.Lock()
		if len(b.q) > 0 {
			c := b.popFrontLocked()
			more := len(b.q) > 0
			b.mu.Unlock()
			if more {
				b.signal()
			}
			return c, true
		}
		b.mu.Unlock()
		select {
		case <-b.ready:
		case <-ctx.Done():
			return chunk{}, false
		}
	}
}

// oldest is when the oldest queued chunk was captured (zero when empty).
func (b *backlog) oldest() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.q) == 0 {
		return time.Time{}
	}
	return b.q[0].captured
}

func (b *backlog) stats() (queued time.Duration, droppedChunks, droppedSamples uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return samplesToDuration(b.samples), b.droppedChunks, b.droppedSamples
}

func samplesToDuration(n int) time.Duration {
	return time.Duration(n) * time.Second / inputRate
}

func durationToSamples(d time.Duration) int {
	return int(d * inputRate / time.Second)
}
