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
}

// backlog is the bounded queue between capture and the sender. When it holds more audio than its
// limit, the oldest chunks are dropped and counted: memory stays bounded and the conversation
// stays live when the link falls behind or is down.
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

// pushFront puts back a chunk that could not be sent, so it goes first next time.
func (b *backlog) pushFront(c chunk) {
	b.mu.Lock()
	b.q = append([]chunk{c}, b.q...)
	b.samples += len(c.audio)
	b.trimLocked()
	b.mu.Unlock()
	b.signal()
}

// setLimit changes the bound (e.g. larger while reconnecting) and applies it at once.
func (b *backlog) setLimit(samples int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limit = samples
	return b.trimLocked()
}

func (b *backlog) trimLocked() int {
	n := 0
	for b.samples > b.limit && len(b.q) > 0 {
		old := b.q[0]
		b.q[0] = chunk{}
		b.q = b.q[1:]
		b.samples -= len(old.audio)
		if b.count {
			b.droppedChunks++
			b.droppedSamples += uint64(len(old.audio))
			n++
		}
	}
	return n
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
			c := b.q[0]
			b.q[0] = chunk{}
			b.q = b.q[1:]
			b.samples -= len(c.audio)
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
