package realtime

import (
	"sync"
	"sync/atomic"
)

// Buffers are memory that sessions of one client take turns with (Config.Buffers): the
// WebSocket write buffer, the buffer a message is read into, the written media messages' buffers
// that the next chunks are built in, and the reply sample buffers handed back (RecycleAudio).
// A session holds each only while it uses it, so two sessions that overlap (a rollover, a
// reconnect) do not keep two of each, and a session that follows another does not grow them
// afresh: each new session used to make about 700 KB of buffers in its first seconds (500 KB
// of it the read buffer doubling up to a second of reply audio) while the old one still held
// its own.
type Buffers struct {
	write   writeSlot
	read    readSlot
	spares  spareList
	samples samplePool
}

// NewBuffers returns buffers for the sessions of one client.
func NewBuffers() *Buffers { return &Buffers{write: writeSlot{kept: make(chan any, 1)}} }

// writeSlot keeps one write buffer between messages (gorilla's WriteBufferPool). A second,
// needed only while two sessions write at the same moment, is made by gorilla and left to the
// collector when the slot is full: a sync.Pool would let the collector take the kept one too,
// and a new buffer (and its zeroing) would come with every chunk.
type writeSlot struct {
	kept chan any
	made atomic.Int64 // times the slot was empty: gorilla made a buffer
}

func (w *writeSlot) Get() any {
	select {
	case b := <-w.kept:
		return b
	default:
		w.made.Add(1)
		return nil
	}
}

func (w *writeSlot) Put(b any) {
	select {
	case w.kept <- b:
	default:
	}
}

// wireWriteBuffer is the WebSocket write buffer: a frame holds at most this much, so a 1 s
// audio chunk (~85 KB) or a chunk with a 640×480 JPEG (~140 KB) is one frame and one write.
// Larger messages (several frames a chunk) still go out, in frames of this size.
const wireWriteBuffer = 160 << 10

// readSlot keeps the read buffer between messages, grown to the largest message read so far. A
// session reading while another holds it grows one of its own; the larger of the two is kept.
type readSlot struct {
	mu   sync.Mutex
	kept []byte
	made atomic.Int64 // times the slot was empty: a read started from no buffer
}

// maxKeptReadBuffer bounds the read buffer kept between messages: a second of reply audio is
// ~128 KB; a rare larger frame gets a buffer of its own.
const maxKeptReadBuffer = 1 << 20

// take returns the kept buffer, empty (nil when none is kept).
func (r *readSlot) take() []byte {
	r.mu.Lock()
	b := r.kept
	r.kept = nil
	r.mu.Unlock()
	if b == nil {
		r.made.Add(1)
	}
	return b[:0]
}

// give keeps b for the next message unless it is outsized or a larger one is kept; nothing may
// use b afterwards.
func (r *readSlot) give(b []byte) {
	if cap(b) > maxKeptReadBuffer {
		return
	}
	r.mu.Lock()
	if cap(b) > cap(r.kept) {
		r.kept = b
	}
	r.mu.Unlock()
}

// spareList keeps written media messages' buffers, the next chunks' messages are built in them:
// a second of audio is ~85 KB of JSON, and building each in a new buffer was most of what a
// session allocated. A few, not one: chunks often come in bursts (a chunk cut at a barge-in, the
// force_listen one after it), faster than the writer hands buffers back.
type spareList struct {
	mu   sync.Mutex
	kept [][]byte
	made atomic.Int64 // times none was kept: a message was built in new memory
}

// maxSpares is how many written media buffers are kept for the next messages: the longest
// burst of chunks the agent sends at once (a cut chunk, the force_listen one, the next).
const maxSpares = 3

// keep keeps a written media message's buffer for a later one; when there are enough, the
// smallest goes. Nothing may use b afterwards.
func (l *spareList) keep(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kept) < maxSpares {
		l.kept = append(l.kept, b)
		return
	}
	smallest := 0
	for i, sp := range l.kept {
		if cap(sp) < cap(l.kept[smallest]) {
			smallest = i
		}
	}
	if cap(b) > cap(l.kept[smallest]) {
		l.kept[smallest] = b
	}
}

// take takes the largest kept buffer, nil when none is kept.
func (l *spareList) take() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.kept)
	if n == 0 {
		l.made.Add(1)
		return nil
	}
	largest := 0
	for i, sp := range l.kept {
		if cap(sp) > cap(l.kept[largest]) {
			largest = i
		}
	}
	b := l.kept[largest]
	l.kept[largest] = l.kept[n-1]
	l.kept[n-1] = nil
	l.kept = l.kept[:n-1]
	return b
}
