package wav

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := Audio{Rate: 24000, Channels: 2, Samples: []float32{0, 0.5, -0.5, 1, -1, 0.25}}
	path := filepath.Join(t.TempDir(), "x.wav")
	if err := WriteFile(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out.Rate != 24000 || out.Channels != 2 || out.Frames() != 3 {
		t.Fatalf("got %d Hz, %d ch, %d frames", out.Rate, out.Channels, out.Frames())
	}
	for i := range in.Samples {
		if d := math.Abs(float64(in.Samples[i] - out.Samples[i])); d > 1.0/16384 {
			t.Fatalf("sample %d: %v became %v", i, in.Samples[i], out.Samples[i])
		}
	}
	mono := out.Mono()
	if len(mono) != 3 || math.Abs(float64(mono[0]-0.25)) > 1e-3 {
		t.Fatalf("mono %v", mono)
	}
}

// wavBytes builds a WAV stream with the given fmt fields and data.
func wavBytes(format, channels, rate, bits int, extra []byte, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(0))
	b.WriteString("WAVE")
	b.Write(extra)
	b.WriteString("fmt ")
	binary.Write(&b, binary.LittleEndian, uint32(16))
	binary.Write(&b, binary.LittleEndian, uint16(format))
	binary.Write(&b, binary.LittleEndian, uint16(channels))
	binary.Write(&b, binary.LittleEndian, uint32(rate))
	binary.Write(&b, binary.LittleEndian, uint32(rate*channels*bits/8))
	binary.Write(&b, binary.LittleEndian, uint16(channels*bits/8))
	binary.Write(&b, binary.LittleEndian, uint16(bits))
	b.WriteString("data")
	binary.Write(&b, binary.LittleEndian, uint32(len(data)))
	b.Write(data)
	return b.Bytes()
}

func TestDecodeFormats(t *testing.T) {
	f32 := make([]byte, 4)
	binary.LittleEndian.PutUint32(f32, math.Float32bits(0.75))
	f64 := make([]byte, 8)
	binary.LittleEndian.PutUint64(f64, math.Float64bits(-0.5))
	list := []byte("LIST\x04\x00\x00\x00abcd")
	for _, tt := range []struct {
		name string
		data []byte
		want float32
	}{
		{"pcm8", wavBytes(1, 1, 8000, 8, nil, []byte{192}), 0.5},
		{"pcm16", wavBytes(1, 1, 16000, 16, nil, []byte{0x00, 0x40}), 0.5},
		{"pcm24", wavBytes(1, 1, 16000, 24, nil, []byte{0x00, 0x00, 0xc0}), -0.5},
		{"pcm32", wavBytes(1, 1, 16000, 32, nil, []byte{0, 0, 0, 0x40}), 0.5},
		{"float32", wavBytes(3, 1, 48000, 32, nil, f32), 0.75},
		{"float64", wavBytes(3, 1, 48000, 64, nil, f64), -0.5},
		{"skips unknown chunk", wavBytes(1, 1, 16000, 16, list, []byte{0x00, 0x40}), 0.5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Decode(bytes.NewReader(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Samples) != 1 || math.Abs(float64(a.Samples[0]-tt.want)) > 1e-6 {
				t.Fatalf("got %v want %v", a.Samples, tt.want)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tt := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no RIFF header"},
		{"not wave", []byte("RIFF\x00\x00\x00\x00AVI "), "not a RIFF/WAVE"},
		{"no fmt", []byte("RIFF\x00\x00\x00\x00WAVE"), "no fmt chunk"},
		{"zero channels", wavBytes(1, 0, 16000, 16, nil, nil), "0 channels"},
		{"mp3 in wav", wavBytes(0x55, 1, 16000, 16, nil, nil), "unsupported encoding"},
		{"12 bit", wavBytes(1, 1, 16000, 12, nil, nil), "unsupported encoding"},
		{"silly rate", wavBytes(1, 1, 0, 16, nil, nil), "sample rate 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// Samples cut by the decoder's block boundary, a torn last frame, and a data size that is not
// the file's (streamed writers leave a wrong one): ReadFile, Decode and Probe agree with a
// plain reading of the bytes.
func TestReadFileAcrossBlocks(t *testing.T) {
	const frames = 30001 // 24-bit stereo: 180,006 bytes, samples cross every 32 KiB block
	data := make([]byte, frames*6+4)
	want := make([]float32, 0, frames*2)
	for i := 0; i < frames*2; i++ {
		v := int32(i*7919%(1<<24)) - 1<<23
		data[3*i], data[3*i+1], data[3*i+2] = byte(v), byte(v>>8), byte(v>>16)
		want = append(want, float32(v)/(1<<23))
	}
	file := wavBytes(1, 2, 48000, 24, nil, data)
	binary.LittleEndian.PutUint32(file[40:44], 256<<20) // more than the file holds
	path := filepath.Join(t.TempDir(), "long.wav")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rate != 48000 || got.Channels != 2 || !slices.Equal(got.Samples, want) {
		t.Fatalf("ReadFile: %d Hz, %d ch, %d samples (want %d); equal: %v", got.Rate, got.Channels, len(got.Samples), len(want), slices.Equal(got.Samples, want))
	}
	if cap(got.Samples) > len(file)/3 {
		t.Errorf("ReadFile's samples have capacity %d: more than the file can hold (%d)", cap(got.Samples), len(file)/3)
	}
	plain, err := Decode(bytes.NewReader(file))
	if err != nil || !slices.Equal(plain.Samples, want) {
		t.Fatalf("Decode: %v, %d samples", err, len(plain.Samples))
	}
	info, err := Probe(bytes.NewReader(file))
	if err != nil || info != (Info{Rate: 48000, Channels: 2, Frames: frames}) {
		t.Fatalf("Probe: %+v, %v", info, err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(wavBytes(1, 2, 44100, 16, nil, []byte{1, 2, 3, 4, 5, 6, 7, 8}))
	f.Add(wavBytes(3, 1, 16000, 32, nil, []byte{0, 0, 0xc0, 0x7f}))
	f.Add([]byte("RIFF\x00\x00\x00\x00WAVEdata\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Decode(bytes.NewReader(data))
		// Probe (the configuration check) and the sized decode (ReadFile) judge alike.
		info, perr := Probe(bytes.NewReader(data))
		sized, serr := decode(bytes.NewReader(data), int64(len(data)))
		if fmt.Sprint(err) != fmt.Sprint(perr) || fmt.Sprint(err) != fmt.Sprint(serr) {
			t.Fatalf("Decode: %v, Probe: %v, sized decode: %v", err, perr, serr)
		}
		if err != nil {
			return
		}
		if info != (Info{Rate: a.Rate, Channels: a.Channels, Frames: a.Frames()}) || !slices.Equal(sized.Samples, a.Samples) {
			t.Fatalf("Probe %+v, sized decode %d samples; Decode %d Hz %d ch %d frames", info, len(sized.Samples), a.Rate, a.Channels, a.Frames())
		}
		if a.Channels < 1 || len(a.Samples)%a.Channels != 0 {
			t.Fatalf("bad audio shape: %d channels, %d samples", a.Channels, len(a.Samples))
		}
		for _, s := range a.Samples {
			if s != s || s > 1 || s < -1 {
				t.Fatalf("sample %v out of range", s)
			}
		}
	})
}

// The streaming writer: what it wrote is a complete WAV file after every Flush, the same bytes
// as Encode of the whole recording at the end, and it holds no samples itself.
func TestWriterStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wav")
	w, err := Create(path, 24000, 1)
	if err != nil {
		t.Fatal(err)
	}
	var all []float32
	for i := range 50 {
		piece := make([]float32, 1000+i)
		for j := range piece {
			piece[j] = float32(math.Sin(float64(len(all)+j) / 7))
		}
		if err := w.Write(piece); err != nil {
			t.Fatal(err)
		}
		all = append(all, piece...)
		if i == 20 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			got, err := ReadFile(path)
			if err != nil {
				t.Fatalf("read after Flush: %v", err)
			}
			if len(got.Samples) != len(all) {
				t.Fatalf("after Flush the file holds %d samples, want %d", len(got.Samples), len(all))
			}
		}
	}
	if w.Frames() != int64(len(all)) {
		t.Fatalf("Frames %d, want %d", w.Frames(), len(all))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Write([]float32{1}); err == nil {
		t.Fatal("Write after Close succeeded")
	}
	var want bytes.Buffer
	if err := Encode(&want, Audio{Rate: 24000, Channels: 1, Samples: all}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("streamed file (%d bytes) differs from Encode (%d bytes)", len(got), want.Len())
	}
	if _, err := Create(filepath.Join(t.TempDir(), "no", "such", "dir.wav"), 24000, 1); err == nil {
		t.Fatal("Create in a missing folder succeeded")
	}
}
