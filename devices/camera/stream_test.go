package camera

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStreamRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := NewStreamWriter(&b)
	jpg := append([]byte{0xFF, 0xD8}, bytes.Repeat([]byte{7}, 1000)...)
	long := "x" + strings.Repeat("é", MaxReasonBytes) // cut at MaxReasonBytes would split a rune
	for _, err := range []error{w.Lost("open camera \"0\": no such device"), w.Up(), w.Frame(jpg), w.Frame(jpg[:2]), w.Lost(long)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	r := NewStreamReader(&b, 2000)
	want := []Message{{Kind: MsgLost, Reason: "open camera \"0\": no such device"}, {Kind: MsgUp}, {Kind: MsgFrame, Frame: jpg}, {Kind: MsgFrame, Frame: jpg[:2]}}
	for i, w := range want {
		m, err := r.Next()
		if err != nil || m.Kind != w.Kind || m.Reason != w.Reason || !bytes.Equal(m.Frame, w.Frame) {
			t.Fatalf("message %d: %+v %v, want %+v", i, m, err, w)
		}
	}
	// A long reason is cut on a rune boundary, so it is still text.
	if m, err := r.Next(); err != nil || m.Kind != MsgLost || len(m.Reason) != MaxReasonBytes-1 {
		t.Fatalf("long reason: %d bytes, %v", len(m.Reason), err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if _, err := NewStreamReader(bytes.NewReader(nil), 10).Next(); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
}

func TestStreamGarbled(t *testing.T) {
	frame := func(kind byte, payload ...byte) string {
		return string(append([]byte{kind, 0, 0, byte(len(payload) >> 8), byte(len(payload))}, payload...))
	}
	for name, in := range map[string]string{
		"no header":       "hello world, this is not it\n",
		"short header":    "omnisat-cam",
		"unknown kind":    streamHeader + frame('X'),
		"oversize frame":  streamHeader + string([]byte{'F', 0, 1, 0, 0}),
		"not a JPEG":      streamHeader + frame('F', 'G', 'I', 'F'),
		"up with payload": streamHeader + frame('U', 1),
		"bad text":        streamHeader + frame('L', 0xff, 0xfe),
		"cut message":     streamHeader + "F\x00\x00\x00\x10\xff\xd8",
		"cut length":      streamHeader + "F\x00\x00",
	} {
		_, err := NewStreamReader(strings.NewReader(in), 100).Next()
		if !errors.Is(err, ErrGarbled) {
			t.Errorf("%s: %v, want a garbled-stream error", name, err)
		}
	}
}

// FuzzStreamReader: whatever the camera program writes, the reader returns well-formed
// messages or an error, never a panic, never a frame beyond its limit.
func FuzzStreamReader(f *testing.F) {
	var b bytes.Buffer
	w := NewStreamWriter(&b)
	w.Up()
	w.Frame([]byte{0xFF, 0xD8, 1, 2, 3})
	w.Lost("gone")
	f.Add(b.Bytes())
	f.Add([]byte(streamHeader + "F\xff\xff\xff\xff"))
	f.Add([]byte(streamHeader + "L\x00\x00\x00\x02\xc3\xa9"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewStreamReader(bytes.NewReader(data), 64)
		for range 1000 {
			m, err := r.Next()
			if err != nil {
				return
			}
			switch m.Kind {
			case MsgFrame:
				if len(m.Frame) > 64 || !bytes.HasPrefix(m.Frame, []byte{0xFF, 0xD8}) {
					t.Fatalf("frame of %d bytes", len(m.Frame))
				}
			case MsgLost:
				if len(m.Reason) > MaxReasonBytes || !utf8.ValidString(m.Reason) {
					t.Fatalf("reason %q", m.Reason)
				}
			case MsgUp:
			default:
				t.Fatalf("kind %q", m.Kind)
			}
		}
	})
}
