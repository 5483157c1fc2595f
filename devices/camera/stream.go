package camera

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// The camera program (cmd/omnisat-camera) writes what it sees to its standard output, which the
// agent's process reads through a pipe:
//
//	"omnisat-camera 1\n"                         once, first
//	kind (1 byte) | length (4 bytes, big-endian) | payload     then any number of messages
//
// with the kinds
//
//	'F' a frame: a JPEG image (it starts with FF D8), at most the reader's frame limit
//	'U' the camera is up (no payload)
//	'L' the camera is lost, or not there yet: why, as UTF-8 text of at most MaxReasonBytes
//
// Anything else is a garbled stream: the reader says so and the agent restarts the program.
const streamHeader = "omnisat-camera 1\n"

// Message kinds.
const (
	MsgFrame byte = 'F'
	MsgUp    byte = 'U'
	MsgLost  byte = 'L'
)

// MaxReasonBytes bounds the text of a lost message.
const MaxReasonBytes = 4096

// Message is one message of the stream.
type Message struct {
	Kind   byte
	Frame  []byte // MsgFrame: the JPEG (the reader's own copy)
	Reason string // MsgLost
}

// ErrGarbled is wrapped by every error a StreamReader returns for data that breaks the format.
var ErrGarbled = errors.New("garbled camera stream")

// StreamWriter writes the stream; it is safe for concurrent use, each message in one Write.
type StreamWriter struct {
	mu     sync.Mutex
	w      io.Writer
	header bool
	buf    []byte
}

// NewStreamWriter writes to w.
func NewStreamWriter(w io.Writer) *StreamWriter { return &StreamWriter{w: w} }

// Frame sends a JPEG image.
func (s *StreamWriter) Frame(jpeg []byte) error { return s.send(MsgFrame, jpeg) }

// Up says the camera delivers.
func (s *StreamWriter) Up() error { return s.send(MsgUp, nil) }

// Lost says the camera is lost (or not there yet) and why; a long reason is cut.
func (s *StreamWriter) Lost(reason string) error {
	if len(reason) > MaxReasonBytes {
		reason = strings.ToValidUTF8(reason[:MaxReasonBytes], "") // not a rune cut in half
	}
	return s.send(MsgLost, []byte(reason))
}

// Begin writes the stream's header now, if no message has (it goes before the first message
// otherwise): for another writer of the same file, such as a camera whose grabber writes its
// frames itself (opencv.OpenWriting), that must find it written.
func (s *StreamWriter) Begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.header {
		return nil
	}
	if _, err := s.w.Write([]byte(streamHeader)); err != nil {
		return fmt.Errorf("write camera stream: %w", err)
	}
	s.header = true
	return nil
}

func (s *StreamWriter) send(kind byte, payload []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = s.buf[:0]
	if !s.header {
		s.buf = append(s.buf, streamHeader...)
	}
	s.buf = append(s.buf, kind)
	s.buf = binary.BigEndian.AppendUint32(s.buf, uint32(len(payload)))
	s.buf = append(s.buf, payload...)
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("write camera stream: %w", err)
	}
	s.header = true
	if cap(s.buf) > 1<<20 { // do not keep a big frame's buffer between frames
		s.buf = nil
	}
	return nil
}

// StreamReader reads the stream.
type StreamReader struct {
	r        *bufio.Reader
	maxFrame int
	header   bool
}

// NewStreamReader reads from r and refuses frames larger than maxFrame bytes.
func NewStreamReader(r io.Reader, maxFrame int) *StreamReader {
	return &StreamReader{r: bufio.NewReaderSize(r, 64<<10), maxFrame: maxFrame}
}

// MaxFrameBytes is the largest JPEG a camera with these settings can plausibly send: three
// bytes a pixel of the largest image it encodes (JPEG never comes near that), plus headers.
func (c Config) MaxFrameBytes() int {
	e := c.WithDefaults().MaxEdge
	return 3*e*e + 64<<10
}

// Next returns the next message: io.EOF when the stream ends cleanly between messages, an
// error wrapping ErrGarbled when it breaks the format, or the reader's error.
func (s *StreamReader) Next() (Message, error) {
	if !s.header {
		got := make([]byte, len(streamHeader))
		if _, err := io.ReadFull(s.r, got); err != nil {
			if errors.Is(err, io.EOF) {
				return Message{}, io.EOF
			}
			return Message{}, s.cut(err)
		}
		if string(got) != streamHeader {
			return Message{}, fmt.Errorf("%w: starts with %q, not the camera program's header", ErrGarbled, got)
		}
		s.header = true
	}
	var hdr [5]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return Message{}, io.EOF
		}
		return Message{}, s.cut(err)
	}
	kind, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
	var limit int
	switch kind {
	case MsgFrame:
		limit = s.maxFrame
	case MsgUp:
		limit = 0
	case MsgLost:
		limit = MaxReasonBytes
	default:
		return Message{}, fmt.Errorf("%w: unknown message kind 0x%02x", ErrGarbled, kind)
	}
	if int64(n) > int64(limit) {
		return Message{}, fmt.Errorf("%w: a %q message of %d bytes (at most %d)", ErrGarbled, kind, n, limit)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(s.r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Message{}, s.cut(err)
	}
	switch kind {
	case MsgFrame:
		if !bytes.HasPrefix(payload, []byte{0xFF, 0xD8}) {
			return Message{}, fmt.Errorf("%w: a frame of %d bytes that is not a JPEG", ErrGarbled, n)
		}
		return Message{Kind: MsgFrame, Frame: payload}, nil
	case MsgLost:
		if !utf8.Valid(payload) {
			return Message{}, fmt.Errorf("%w: a reason that is not UTF-8 text", ErrGarbled)
		}
		return Message{Kind: MsgLost, Reason: string(payload)}, nil
	}
	return Message{Kind: MsgUp}, nil
}

// cut is the error for a stream that ended inside a header or message.
func (s *StreamReader) cut(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: the stream ends inside a message", ErrGarbled)
	}
	return fmt.Errorf("read camera stream: %w", err)
}
