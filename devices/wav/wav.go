// Package wav reads and writes RIFF/WAVE files: the file-backed stand-ins for a microphone and a
// speaker, reference voices, and demo recordings. It is pure Go so every package can use it.
package wav

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// Audio is decoded sound: interleaved float32 samples in [-1, 1].
type Audio struct {
	Rate     int
	Channels int
	Samples  []float32 // interleaved, len = frames × Channels
}

// Frames is the number of sample frames (samples per channel).
func (a Audio) Frames() int {
	if a.Channels == 0 {
		return 0
	}
	return len(a.Samples) / a.Channels
}

// Mono returns the channels mixed down to one.
func (a Audio) Mono() []float32 {
	if a.Channels == 1 {
		return a.Samples
	}
	out := make([]float32, a.Frames())
	scale := 1 / float32(a.Channels)
	for i := range out {
		var sum float32
		for c := 0; c < a.Channels; c++ {
			sum += a.Samples[i*a.Channels+c]
		}
		out[i] = sum * scale
	}
	return out
}

// Limits on what Decode accepts from a file; beyond them the file is refused, not allocated.
const (
	maxChannels = 32
	maxRate     = 768000
	// MaxDataBytes bounds the sample data read from one file (1 GiB).
	MaxDataBytes = 1 << 30
)

const (
	formatPCM        = 1
	formatFloat      = 3
	formatExtensible = 0xFFFE
)

// ReadFile decodes a WAV file.
func ReadFile(path string) (Audio, error) {
	f, err := os.Open(path)
	if err != nil {
		return Audio{}, err
	}
	defer f.Close()
	// The file's size bounds the samples: they are decoded straight into a slice of that
	// capacity instead of one grown as they come (a fresh page costs more than the decoding).
	var limit int64 = -1
	if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
		limit = info.Size()
	}
	a, err := decode(bufio.NewReader(f), limit)
	if err != nil {
		return Audio{}, fmt.Errorf("read WAV %q: %w", path, err)
	}
	return a, nil
}

// Decode reads PCM (8/16/24/32-bit integer) or IEEE float (32/64-bit) WAV data, plain or
// WAVE_FORMAT_EXTENSIBLE. Unknown chunks are skipped.
func Decode(r io.Reader) (Audio, error) { return decode(r, -1) }

// Info is what Probe finds: the format and how many whole frames the data holds.
type Info struct {
	Rate, Channels, Frames int
}

// Probe checks a WAV stream as Decode does (the same errors for the same input) and counts its
// frames, without keeping any samples: for checking a file that is decoded later.
func Probe(r io.Reader) (Info, error) {
	h, err := readHeader(r)
	if err != nil {
		return Info{}, err
	}
	n, err := io.Copy(io.Discard, io.LimitReader(r, h.size))
	if err != nil {
		return Info{}, fmt.Errorf("read samples: %w", err)
	}
	return Info{Rate: h.rate, Channels: h.channels, Frames: int(n / int64(h.frameBytes()))}, nil
}

// format is the format chunk and the size the data chunk claims.
type format struct {
	encoding, channels, bits, rate int // encoding: formatPCM or formatFloat
	size                           int64
}

func (h format) frameBytes() int { return h.bits / 8 * h.channels }

// decode is Decode; limit, when not negative, bounds the bytes that can follow (the file's size).
func decode(r io.Reader, limit int64) (Audio, error) {
	h, err := readHeader(r)
	if err != nil {
		return Audio{}, err
	}
	if limit >= 0 {
		h.size = min(h.size, limit)
	}
	return decodeData(r, h, limit >= 0)
}

// readHeader reads up to the start of the data chunk and checks the format.
func readHeader(r io.Reader) (format, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return format{}, fmt.Errorf("no RIFF header: %w", err)
	}
	if string(hdr[0:4]) != "RIFF" || string(hdr[8:12]) != "WAVE" {
		return format{}, errors.New("not a RIFF/WAVE file")
	}
	var h format
	haveFmt := false
	for {
		var ch [8]byte
		if _, err := io.ReadFull(r, ch[:]); err != nil {
			if haveFmt {
				return format{}, errors.New("no data chunk")
			}
			return format{}, errors.New("no fmt chunk")
		}
		id, size := string(ch[0:4]), int64(binary.LittleEndian.Uint32(ch[4:8]))
		switch id {
		case "fmt ":
			if size < 16 || size > 1024 {
				return format{}, fmt.Errorf("fmt chunk of %d bytes", size)
			}
			buf := make([]byte, size+size%2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return format{}, fmt.Errorf("short fmt chunk: %w", err)
			}
			h.encoding = int(binary.LittleEndian.Uint16(buf[0:2]))
			h.channels = int(binary.LittleEndian.Uint16(buf[2:4]))
			h.rate = int(binary.LittleEndian.Uint32(buf[4:8]))
			h.bits = int(binary.LittleEndian.Uint16(buf[14:16]))
			if h.encoding == formatExtensible {
				if size < 40 {
					return format{}, errors.New("extensible fmt chunk too short")
				}
				h.encoding = int(binary.LittleEndian.Uint16(buf[24:26]))
			}
			if h.channels < 1 || h.channels > maxChannels {
				return format{}, fmt.Errorf("%d channels (want 1..%d)", h.channels, maxChannels)
			}
			if h.rate < 1 || h.rate > maxRate {
				return format{}, fmt.Errorf("sample rate %d Hz (want 1..%d)", h.rate, maxRate)
			}
			switch {
			case h.encoding == formatPCM && (h.bits == 8 || h.bits == 16 || h.bits == 24 || h.bits == 32):
			case h.encoding == formatFloat && (h.bits == 32 || h.bits == 64):
			default:
				return format{}, fmt.Errorf("unsupported encoding: format %d with %d bits", h.encoding, h.bits)
			}
			haveFmt = true
		case "data":
			if !haveFmt {
				return format{}, errors.New("data chunk before fmt chunk")
			}
			if size > MaxDataBytes {
				return format{}, fmt.Errorf("data chunk of %d bytes is over the %d limit", size, MaxDataBytes)
			}
			h.size = size
			return h, nil
		default:
			if _, err := io.CopyN(io.Discard, r, size+size%2); err != nil {
				return format{}, fmt.Errorf("short %q chunk: %w", id, err)
			}
		}
	}
}

// decodeData converts the samples a block at a time. Many writers leave a wrong size (0 or
// 0xFFFFFFFF) on streamed files, so it reads what is there, up to h.size; sized says h.size
// is bounded by what can follow, so the samples get a slice of that capacity at once.
func decodeData(r io.Reader, h format, sized bool) (Audio, error) {
	width := h.bits / 8
	var out []float32
	if sized {
		out = make([]float32, 0, h.size/int64(width))
	}
	var block [32 << 10]byte
	left, have := h.size, 0
	for left > 0 {
		n, err := io.ReadFull(r, block[have:min(int64(len(block)), int64(have)+left)])
		left -= int64(n)
		have += n
		whole := have - have%width
		out = appendSamples(out, block[:whole], h.encoding, h.bits)
		have = copy(block[:], block[whole:have])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return Audio{}, fmt.Errorf("read samples: %w", err)
		}
	}
	out = out[:len(out)-len(out)%h.channels] // whole frames only
	return Audio{Rate: h.rate, Channels: h.channels, Samples: out}, nil
}

// appendSamples converts raw little-endian samples of one width (len(raw) a multiple of it).
func appendSamples(out []float32, raw []byte, encoding, bits int) []float32 {
	width := bits / 8
	for i := 0; i+width <= len(raw); i += width {
		b := raw[i:]
		var v float32
		switch {
		case encoding == formatFloat && bits == 32:
			v = finite(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
		case encoding == formatFloat:
			v = finite(math.Float64frombits(binary.LittleEndian.Uint64(b)))
		case bits == 8:
			v = (float32(b[0]) - 128) / 128
		case bits == 16:
			v = float32(int16(binary.LittleEndian.Uint16(b))) / 32768
		case bits == 24:
			x := int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24) >> 8
			v = float32(x) / (1 << 23)
		default:
			v = float32(float64(int32(binary.LittleEndian.Uint32(b))) / (1 << 31))
		}
		out = append(out, v)
	}
	return out
}

// finite clamps to [-1, 1] and turns NaN into silence, so a bad file cannot poison a mix.
func finite(v float64) float32 {
	switch {
	case v != v:
		return 0
	case v > 1:
		return 1
	case v < -1:
		return -1
	}
	return float32(v)
}

// WriteFile writes mono or interleaved samples as 16-bit PCM.
func WriteFile(path string, a Audio) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := Encode(w, a); err != nil {
		f.Close()
		return fmt.Errorf("write WAV %q: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write WAV %q: %w", path, err)
	}
	return f.Close()
}

// Encode writes a 16-bit PCM WAV stream.
func Encode(w io.Writer, a Audio) error {
	if a.Channels < 1 || a.Rate < 1 {
		return fmt.Errorf("bad format: %d channels at %d Hz", a.Channels, a.Rate)
	}
	dataBytes := 2 * int64(len(a.Samples))
	if dataBytes > maxPCMBytes {
		return errors.New("too long for a WAV file")
	}
	if _, err := w.Write(header(a.Rate, a.Channels, uint32(dataBytes))); err != nil {
		return err
	}
	buf := make([]byte, 0, 4096)
	for s := a.Samples; len(s) > 0; {
		n := min(len(s), cap(buf)/2)
		if _, err := w.Write(appendPCM16(buf[:0], s[:n])); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}

// maxPCMBytes is the most sample data a WAV header can describe.
const maxPCMBytes = math.MaxUint32 - 36

// header is the 44-byte header of a 16-bit PCM WAV file with dataBytes of samples.
func header(rate, channels int, dataBytes uint32) []byte {
	hdr := make([]byte, 44)
	copy(hdr[0:], "RIFF")
	binary.LittleEndian.PutUint32(hdr[4:], 36+dataBytes)
	copy(hdr[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(hdr[16:], 16)
	binary.LittleEndian.PutUint16(hdr[20:], formatPCM)
	binary.LittleEndian.PutUint16(hdr[22:], uint16(channels))
	binary.LittleEndian.PutUint32(hdr[24:], uint32(rate))
	binary.LittleEndian.PutUint32(hdr[28:], uint32(rate*channels*2))
	binary.LittleEndian.PutUint16(hdr[32:], uint16(channels*2))
	binary.LittleEndian.PutUint16(hdr[34:], 16)
	copy(hdr[36:], "data")
	binary.LittleEndian.PutUint32(hdr[40:], dataBytes)
	return hdr
}

// appendPCM16 appends samples as little-endian 16-bit PCM (rounded, clipped, NaN as 0).
func appendPCM16(buf []byte, samples []float32) []byte {
	for _, s := range samples {
		v := math.Round(float64(s) * 32767)
		v = math.Max(-32768, math.Min(32767, v))
		if v != v {
			v = 0
		}
		buf = binary.LittleEndian.AppendUint16(buf, uint16(int16(v)))
	}
	return buf
}

// Writer streams 16-bit PCM samples into a WAV file as they come, so that a long recording
// never has to be held in memory. The header's sizes are brought up to date by Flush and
// Close: after either, the file on disk is a complete WAV file of everything written so far.
type Writer struct {
	f        *os.File
	w        *bufio.Writer
	path     string
	rate     int
	channels int
	data     int64 // sample bytes written
	buf      []byte
	err      error // the first failure; every later call returns it
}

// Create creates (or truncates) the file at path and writes its header.
func Create(path string, rate, channels int) (*Writer, error) {
	if channels < 1 || rate < 1 {
		return nil, fmt.Errorf("create WAV %q: bad format: %d channels at %d Hz", path, channels, rate)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create WAV %q: %w", path, err)
	}
	w := &Writer{f: f, w: bufio.NewWriter(f), path: path, rate: rate, channels: channels, buf: make([]byte, 0, 4096)}
	if _, err := w.w.Write(header(rate, channels, 0)); err != nil {
		f.Close()
		return nil, fmt.Errorf("create WAV %q: %w", path, err)
	}
	return w, nil
}

// Write appends interleaved samples. Beyond the 4 GiB a WAV header can describe, it fails.
func (w *Writer) Write(samples []float32) error {
	for w.err == nil && len(samples) > 0 {
		n := min(len(samples), cap(w.buf)/2)
		if w.data+2*int64(n) > maxPCMBytes {
			w.err = fmt.Errorf("write WAV %q: too long for a WAV file", w.path)
			break
		}
		if _, err := w.w.Write(appendPCM16(w.buf[:0], samples[:n])); err != nil {
			w.err = fmt.Errorf("write WAV %q: %w", w.path, err)
			break
		}
		w.data += 2 * int64(n)
		samples = samples[n:]
	}
	return w.err
}

// Path is the file's path.
func (w *Writer) Path() string { return w.path }

// Frames is the number of sample frames written so far.
func (w *Writer) Frames() int64 { return w.data / 2 / int64(w.channels) }

// Flush writes what is buffered and the header's sizes.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("write WAV %q: %w", w.path, err)
		return w.err
	}
	if _, err := w.f.WriteAt(header(w.rate, w.channels, uint32(w.data))[:44], 0); err != nil {
		w.err = fmt.Errorf("write WAV %q: %w", w.path, err)
	}
	return w.err
}

// Close flushes and closes the file; closing twice is harmless.
func (w *Writer) Close() error {
	if w.f == nil {
		return nil
	}
	err := w.Flush()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close WAV %q: %w", w.path, cerr)
	}
	w.f = nil
	if w.err == nil {
		w.err = fmt.Errorf("write WAV %q: closed", w.path)
	}
	return err
}
