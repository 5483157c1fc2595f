package mqtt

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func payloads(t *testing.T, o *outbox) []string {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, r := range o.pending {
		out = append(out, r.topic+"="+string(r.payload))
	}
	return out
}

func TestOutboxAppendAckReload(t *testing.T) {
	dir := t.TempDir()
	o, err := openOutbox(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := o.Enqueue("t", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := o.Peek()
	if err := o.Ack(r.end); err != nil {
		t.Fatal(err)
	}
	r, _ = o.Peek()
	_ = o.Ack(r.end)
	_ = o.Ack(r.end) // twice: no harm
	o.Close()

	o, err = openOutbox(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(payloads(t, o)); got != "[t=2 t=3 t=4]" {
		t.Fatalf("after reload %s", got)
	}
	// A torn last record (power cut mid-append) is cut off; the rest survives.
	o.Close()
	f, _ := os.OpenFile(filepath.Join(dir, logName), os.O_WRONLY|os.O_APPEND, 0)
	f.Write(encodeRecord("t", []byte("torn"))[:9])
	f.Close()
	o, err = openOutbox(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(payloads(t, o)); got != "[t=2 t=3 t=4]" {
		t.Fatalf("after torn tail %s", got)
	}
	if _, err := o.Enqueue("t", []byte("5")); err != nil {
		t.Fatal(err)
	}
	o.Close()
	o, _ = openOutbox(dir, 1<<20)
	defer o.Close()
	if got := fmt.Sprint(payloads(t, o)); got != "[t=2 t=3 t=4 t=5]" {
		t.Fatalf("append after torn tail %s", got)
	}
}

func TestOutboxBoundDropsOldest(t *testing.T) {
	dir := t.TempDir()
	msg := make([]byte, 89) // 100 bytes a record: 8 header + 2 + topic "t" + 89
	o, err := openOutbox(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i := 0; i < 15; i++ {
		msg[0] = byte('a' + i)
		d, err := o.Enqueue("t", msg)
		if err != nil {
			t.Fatal(err)
		}
		total += d
	}
	n, bytes, dropped := o.Stats()
	if n != 10 || bytes != 1000 || dropped != 5 || total != 5 {
		t.Fatalf("pending %d (%d bytes), dropped %d / %d", n, bytes, dropped, total)
	}
	if r, _ := o.Peek(); r.payload[0] != 'f' {
		t.Fatalf("oldest kept is %q, want f", r.payload[0])
	}
	if _, err := o.Enqueue("t", make([]byte, 2000)); err == nil {
		t.Fatal("a message larger than the outbox was accepted")
	}
	o.Close()
	o, _ = openOutbox(dir, 1000)
	if r, _ := o.Peek(); r.payload[0] != 'f' {
		t.Fatalf("after reload oldest is %q, want f", r.payload[0])
	}
	o.Close()
	// A smaller bound at the next start drops the oldest at once.
	o, _ = openOutbox(dir, 500)
	defer o.Close()
	if n, _, _ := o.Stats(); n != 5 {
		t.Fatalf("%d pending under a 500-byte bound", n)
	}
}

// Delivered messages are compacted away: the log stays near the bound however long it runs.
func TestOutboxCompaction(t *testing.T) {
	dir := t.TempDir()
	o, err := openOutbox(dir, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		if _, err := o.Enqueue("topic", []byte(fmt.Sprintf("message %d", i))); err != nil {
			t.Fatal(err)
		}
		if i%3 != 2 { // leave some pending now and then
			r, _ := o.Peek()
			if err := o.Ack(r.end); err != nil {
				t.Fatal(err)
			}
		}
	}
	fi, err := os.Stat(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 3*4096 {
		t.Errorf("log is %d bytes with a 4096-byte bound", fi.Size())
	}
	want := fmt.Sprint(payloads(t, o))
	o.Close()
	o, _ = openOutbox(dir, 4096)
	defer o.Close()
	if got := fmt.Sprint(payloads(t, o)); got != want {
		t.Errorf("after compaction and reload\n got %s\nwant %s", got, want)
	}
}

func TestOutboxRejectsForeignFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, logName), []byte("something else entirely"), 0o600)
	if _, err := openOutbox(dir, 4096); err == nil {
		t.Fatal("opened a file that is not an outbox")
	}
}

func FuzzOutboxLoad(f *testing.F) {
	f.Add(append([]byte(outboxMagic+"\x00\x00\x00\x00\x00\x00\x00\x00"), encodeRecord("t", []byte("x"))...))
	f.Add([]byte(outboxMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, logName), data, 0o600)
		o, err := openOutbox(dir, 4096)
		if err != nil {
			return
		}
		defer o.Close()
		if _, err := o.Enqueue("t", []byte("after")); err != nil {
			t.Fatal(err)
		}
	})
}
