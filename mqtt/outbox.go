package mqtt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// The outbox is an append-only log of messages on disk plus a separate acknowledged offset.
//
//	outbox.log  header: "OMNIOBX1" + base (uint64 BE: the absolute offset of the first record)
//	            records: len uint32 BE | crc32(body) uint32 BE | body = topicLen uint16 BE | topic | payload
//	outbox.ack  acked (uint64 BE, absolute offset: everything before it is delivered) | crc32 uint32 BE
//
// Offsets are absolute and only grow, so compaction (rewriting the log with only the unacknowledged
// records and base = acked) never has to touch the ack file, and a crash at any point leaves a
// consistent pair. Durability: every append is fsynced before Enqueue returns (a message accepted
// is on disk); the ack file is replaced by rename without fsync, so a power cut may re-send a few
// messages already delivered (at-least-once, like QoS 1 itself); a process crash loses nothing and
// repeats nothing beyond the one message that was in flight. A torn last record (power cut during
// an append) is cut off at load.
const (
	outboxMagic   = "OMNIOBX1"
	outboxHeader  = 16
	recordHeader  = 8
	logName       = "outbox.log"
	ackName       = "outbox.ack"
	maxTopicBytes = 1<<16 - 1
)

type outRecord struct {
	start, end int64 // absolute offsets
	topic      string
	payload    []byte
}

func (r outRecord) size() int64 { return r.end - r.start }

type outbox struct {
	dir string
	max int64

	mu           sync.Mutex
	f            *os.File
	base         int64 // absolute offset of the first byte after the header
	end          int64 // absolute offset of the end of the log
	acked        int64
	pending      []outRecord
	pendingBytes int64
	dropped      uint64 // messages dropped by the bound since open
	ready        chan struct{}
	empty        chan struct{} // signalled when the last waiting message is acknowledged
}

// openOutbox opens (or creates) the outbox in dir and loads every message not yet acknowledged.
func openOutbox(dir string, max int64) (*outbox, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("outbox: create directory %q: %w", dir, err)
	}
	o := &outbox{dir: dir, max: max, ready: make(chan struct{}, 1), empty: make(chan struct{}, 1)}
	path := filepath.Join(dir, logName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("outbox: open %q: %w", path, err)
	}
	o.f = f
	if err := o.load(); err != nil {
		f.Close()
		return nil, fmt.Errorf("outbox: load %q: %w", path, err)
	}
	// A smaller bound than last time: drop the oldest now.
	if n := o.dropFor(0); n > 0 {
		if err := o.writeAck(); err != nil {
			f.Close()
			return nil, err
		}
	}
	if len(o.pending) > 0 {
		o.signal()
	}
	return o, nil
}

func (o *outbox) load() error {
	data, err := io.ReadAll(io.NewSectionReader(o.f, 0, 1<<62))
	if err != nil {
		return err
	}
	if len(data) < outboxHeader || string(data[:8]) != outboxMagic {
		if len(data) >= 8 && string(data[:8]) != outboxMagic {
			return fmt.Errorf("not an omnisat outbox (bad magic %q)", data[:8])
		}
		// New (or a header torn at creation): start empty.
		return o.rewrite(0, nil)
	}
	o.base = int64(binary.BigEndian.Uint64(data[8:16]))
	o.acked = o.base
	if a, ok := readAck(filepath.Join(o.dir, ackName)); ok && a > o.base {
		o.acked = a
	}
	pos := outboxHeader
	for pos < len(data) {
		rec, n, ok := decodeRecord(data[pos:])
		if !ok {
			break // torn or corrupt tail: cut it off
		}
		rec.start = o.base + int64(pos-outboxHeader)
		rec.end = rec.start + int64(n)
		if rec.end > o.acked {
			o.pending = append(o.pending, rec)
			o.pendingBytes += rec.size()
		}
		pos += n
	}
	if pos < len(data) {
		if err := o.f.Truncate(int64(pos)); err != nil {
			return fmt.Errorf("cut torn tail at %d: %w", pos, err)
		}
	}
	o.end = o.base + int64(pos-outboxHeader)
	if o.acked > o.end {
		o.acked = o.end
	}
	return nil
}

func decodeRecord(b []byte) (outRecord, int, bool) {
	if len(b) < recordHeader {
		return outRecord{}, 0, false
	}
	n := int(binary.BigEndian.Uint32(b[0:4]))
	sum := binary.BigEndian.Uint32(b[4:8])
	if n < 2 || n > len(b)-recordHeader {
		return outRecord{}, 0, false
	}
	body := b[recordHeader : recordHeader+n]
	if crc32.ChecksumIEEE(body) != sum {
		return outRecord{}, 0, false
	}
	tl := int(binary.BigEndian.Uint16(body[0:2]))
	if tl > n-2 {
		return outRecord{}, 0, false
	}
	return outRecord{topic: string(body[2 : 2+tl]), payload: append([]byte(nil), body[2+tl:]...)}, recordHeader + n, true
}

func encodeRecord(topic string, payload []byte) []byte {
	body := make([]byte, 2+len(topic)+len(payload))
	binary.BigEndian.PutUint16(body, uint16(len(topic)))
	copy(body[2:], topic)
	copy(body[2+len(topic):], payload)
	rec := make([]byte, recordHeader, recordHeader+len(body))
	binary.BigEndian.PutUint32(rec[0:4], uint32(len(body)))
	binary.BigEndian.PutUint32(rec[4:8], crc32.ChecksumIEEE(body))
	return append(rec, body...)
}

func readAck(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) != 12 || crc32.ChecksumIEEE(b[:8]) != binary.BigEndian.Uint32(b[8:]) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[:8])), true
}

func (o *outbox) writeAck() error {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(o.acked))
	binary.BigEndian.PutUint32(b[8:], crc32.ChecksumIEEE(b[:8]))
	path := filepath.Join(o.dir, ackName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b[:], 0o600); err != nil {
		return fmt.Errorf("outbox: write %q: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("outbox: rename %q: %w", tmp, err)
	}
	return nil
}

// rewrite replaces the log with a header (base) and the given records, fsynced, by rename.
func (o *outbox) rewrite(base int64, recs []outRecord) error {
	path := filepath.Join(o.dir, logName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("outbox: create %q: %w", tmp, err)
	}
	buf := make([]byte, outboxHeader, outboxHeader+o.pendingBytes)
	copy(buf, outboxMagic)
	binary.BigEndian.PutUint64(buf[8:], uint64(base))
	pos := base
	out := make([]outRecord, 0, len(recs))
	for _, r := range recs {
		enc := encodeRecord(r.topic, r.payload)
		r.start, r.end = pos, pos+int64(len(enc))
		pos = r.end
		buf = append(buf, enc...)
		out = append(out, r)
	}
	if _, err := f.Write(buf); err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("outbox: write %q: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return fmt.Errorf("outbox: rename %q: %w", tmp, err)
	}
	if d, err := os.Open(o.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	if o.f != nil {
		o.f.Close()
	}
	o.f = f
	o.base, o.end = base, pos
	o.pending = out
	if o.acked < base {
		o.acked = base
	}
	return nil
}

// dropFor drops the oldest messages until need more bytes fit under the bound; it returns how
// many it dropped.
func (o *outbox) dropFor(need int64) int {
	n := 0
	for len(o.pending) > 0 && o.pendingBytes+need > o.max {
		r := o.pending[0]
		o.pending = o.pending[1:]
		o.pendingBytes -= r.size()
		o.acked = r.end
		o.dropped++
		n++
	}
	return n
}

// Enqueue appends a message durably. dropped is how many of the oldest messages the bound pushed
// out to make room.
func (o *outbox) Enqueue(topic string, payload []byte) (dropped int, err error) {
	if len(topic) > maxTopicBytes {
		return 0, fmt.Errorf("outbox: topic of %d bytes is too long", len(topic))
	}
	enc := encodeRecord(topic, payload)
	size := int64(len(enc))
	if size > o.max {
		return 0, fmt.Errorf("outbox: a %d-byte message on %q is larger than the whole outbox (%d bytes)", size, topic, o.max)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return 0, errors.New("outbox: closed")
	}
	dropped = o.dropFor(size)
	filePos := outboxHeader + (o.end - o.base)
	if _, err := o.f.WriteAt(enc, filePos); err != nil {
		_ = o.f.Truncate(filePos)
		return dropped, fmt.Errorf("outbox: append to %q: %w", filepath.Join(o.dir, logName), err)
	}
	if err := o.f.Sync(); err != nil {
		return dropped, fmt.Errorf("outbox: sync %q: %w", filepath.Join(o.dir, logName), err)
	}
	r := outRecord{start: o.end, end: o.end + size, topic: topic, payload: append([]byte(nil), payload...)}
	o.end = r.end
	o.pending = append(o.pending, r)
	o.pendingBytes += size
	if dropped > 0 {
		if err := o.writeAck(); err != nil {
			return dropped, err
		}
		o.maybeCompact()
	}
	o.signal()
	return dropped, nil
}

func (o *outbox) signal() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// Peek returns the oldest message not yet acknowledged.
func (o *outbox) Peek() (outRecord, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) == 0 {
		return outRecord{}, false
	}
	return o.pending[0], true
}

// Ack records that every message ending at or before end has been delivered.
func (o *outbox) Ack(end int64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return errors.New("outbox: closed")
	}
	if end <= o.acked {
		return nil // already acknowledged, or dropped by the bound meanwhile
	}
	o.acked = end
	for len(o.pending) > 0 && o.pending[0].end <= o.acked {
		o.pendingBytes -= o.pending[0].size()
		o.pending = o.pending[1:]
	}
	if err := o.writeAck(); err != nil {
		return err
	}
	o.maybeCompact()
	if len(o.pending) == 0 {
		select {
		case o.empty <- struct{}{}:
		default:
		}
	}
	return nil
}

// waitEmpty waits until every message has been acknowledged; false when ctx ends first.
func (o *outbox) waitEmpty(ctx context.Context) bool {
	for {
		if n, _, _ := o.Stats(); n == 0 {
			return true
		}
		select {
		case <-o.empty:
		case <-ctx.Done():
			return false
		}
	}
}

// maybeCompact rewrites the log once the delivered prefix is half the bound or more.
func (o *outbox) maybeCompact() {
	if o.acked-o.base < o.max/2 {
		return
	}
	_ = o.rewrite(o.acked, o.pending) // on failure the old log stays valid; try again later
}

// Stats: messages waiting, their bytes, and messages dropped by the bound since open.
func (o *outbox) Stats() (pending int, bytes int64, dropped uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending), o.pendingBytes, o.dropped
}

// Close makes the acknowledged offset durable (a clean stop must not send again what the broker
// has acknowledged, even after a power cut) and closes the log. It is safe to call twice.
func (o *outbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return nil
	}
	err := syncFile(filepath.Join(o.dir, ackName))
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	o.f = nil
	return err
}

// syncFile fsyncs an existing file and its folder (a missing file is nothing to sync).
func syncFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
