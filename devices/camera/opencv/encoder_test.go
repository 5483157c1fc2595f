package opencv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	stdjpeg "image/jpeg"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gocv.io/x/gocv"

	"github.com/omnisat/omnisat/pipeline/jpeg"
)

// testFrame is a camera-like BGR picture: smooth gradients, hard-edged shapes and sensor noise,
// so that the encoder has both flat areas and detail to work on. It is deterministic.
func testFrame(t testing.TB, w, h int) gocv.Mat {
	t.Helper()
	m := gocv.NewMatWithSize(h, w, gocv.MatTypeCV8UC3)
	px, err := m.DataPtrUint8()
	if err != nil {
		t.Fatalf("frame data: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			b := 255 * x / w
			g := 255 * y / h
			r := 128 + 100*((x/(w/8+1)+y/(h/6+1))%2) - 50
			if (x-w/3)*(x-w/3)+(y-h/2)*(y-h/2) < (h/5)*(h/5) {
				b, g, r = 30, 200, 240
			}
			i := 3 * (y*w + x)
			for c, v := range [3]int{b, g, r} {
				v += rng.IntN(17) - 8
				px[i+c] = uint8(min(255, max(0, v)))
			}
		}
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newEncoder(t testing.TB, o jpeg.Options) *Encoder {
	t.Helper()
	e, err := NewEncoder(o)
	if err != nil {
		t.Fatalf("NewEncoder(%+v): %v", o, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func decode(t testing.TB, b []byte) image.Image {
	t.Helper()
	img, err := stdjpeg.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("image/jpeg cannot decode the output (%d bytes): %v", len(b), err)
	}
	return img
}

func TestEncodeSize(t *testing.T) {
	for _, tc := range []struct {
		name         string
		w, h, edge   int
		wantW, wantH int
	}{
		{"vga default", 640, 480, 0, 640, 480},
		{"720p default", 1280, 720, 0, 640, 360},
		{"1080p to 512", 1920, 1080, 512, 512, 288},
		{"portrait", 480, 640, 320, 240, 320},
		{"odd ratio rounds", 1000, 333, 640, 640, 213},
		{"never upscaled", 320, 240, 640, 320, 240},
		{"exactly the edge", 640, 360, 640, 640, 360},
		{"thin strip", 4000, 2, 640, 640, 1},
		{"tiny", 1, 1, 0, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEncoder(t, jpeg.Options{MaxEdge: tc.edge})
			b, err := e.Encode(testFrame(t, tc.w, tc.h))
			if err != nil {
				t.Fatal(err)
			}
			got := decode(t, b).Bounds().Size()
			if got != image.Pt(tc.wantW, tc.wantH) {
				t.Errorf("%dx%d with max edge %d: got %v, want %dx%d", tc.w, tc.h, tc.edge, got, tc.wantW, tc.wantH)
			}
		})
	}
}

func TestQualityHonoured(t *testing.T) {
	src := testFrame(t, 640, 480)
	prev := 0
	for _, q := range []int{10, 30, 50, 80, 95} {
		e := newEncoder(t, jpeg.Options{Quality: q})
		b, err := e.Encode(src)
		if err != nil {
			t.Fatal(err)
		}
		decode(t, b)
		if got, ok := estimateQuality(b); !ok || got != q {
			t.Errorf("quality %d: the luminance table matches quality %d (found: %v)", q, got, ok)
		}
		if len(b) <= prev {
			t.Errorf("quality %d gave %d bytes, not more than the %d of the quality below", q, len(b), prev)
		}
		prev = len(b)
	}
}

func TestDefaults(t *testing.T) {
	e := newEncoder(t, jpeg.Options{})
	if o := e.Options(); o.MaxEdge != 640 || o.Quality != 80 {
		t.Fatalf("defaults: %+v", o)
	}
	b, err := e.Encode(testFrame(t, 1280, 720))
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := estimateQuality(b); q != 80 {
		t.Errorf("default quality: got %d", q)
	}
}

func TestEncodeReusesBufferAndReturnsFreshBytes(t *testing.T) {
	e := newEncoder(t, jpeg.Options{MaxEdge: 320})
	src := testFrame(t, 1280, 720)
	a, err := e.Encode(src)
	if err != nil {
		t.Fatal(err)
	}
	keep := slices.Clone(a)
	// A different image through the same encoder must not change what was returned before.
	other := testFrame(t, 640, 480)
	gocv.BitwiseNot(other, &other)
	if _, err := e.Encode(other); err != nil {
		t.Fatal(err)
	}
	b, err := e.Encode(src)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, keep) {
		t.Fatal("a later Encode changed an earlier result")
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the same frame encoded twice gave different bytes")
	}
	if &a[0] == &b[0] {
		t.Fatal("two Encode calls returned the same backing array")
	}
}

// greyAndBGRA converts a BGR frame to one channel and to four, closed when t ends.
func greyAndBGRA(t testing.TB, src gocv.Mat) (grey, bgra gocv.Mat) {
	grey, bgra = gocv.NewMat(), gocv.NewMat()
	t.Cleanup(func() { grey.Close(); bgra.Close() })
	gocv.CvtColor(src, &grey, gocv.ColorBGRToGray)
	gocv.CvtColor(src, &bgra, gocv.ColorBGRToBGRA)
	return grey, bgra
}

func TestEncodeChannels(t *testing.T) {
	src := testFrame(t, 800, 600)
	grey, bgra := greyAndBGRA(t, src)
	e := newEncoder(t, jpeg.Options{})
	for name, m := range map[string]gocv.Mat{"grey": grey, "bgra": bgra} {
		b, err := e.Encode(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := decode(t, b).Bounds().Size(); got != image.Pt(640, 480) {
			t.Errorf("%s: size %v", name, got)
		}
	}
}

func TestBadInput(t *testing.T) {
	e := newEncoder(t, jpeg.Options{})
	empty := gocv.NewMat()
	defer empty.Close()
	float := gocv.NewMatWithSize(48, 64, gocv.MatTypeCV32FC3)
	defer float.Close()
	two := gocv.NewMatWithSize(48, 64, gocv.MatTypeCV8UC2)
	defer two.Close()
	closed := gocv.NewMatWithSize(48, 64, gocv.MatTypeCV8UC3)
	closed.Close()
	for name, m := range map[string]gocv.Mat{"empty": empty, "float": float, "two channels": two, "closed": closed} {
		if _, err := e.Encode(m); err == nil || !strings.HasPrefix(err.Error(), "encode jpeg: ") {
			t.Errorf("%s: got error %v", name, err)
		}
	}
	e.Close()
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := e.Encode(testFrame(t, 64, 48)); !errors.Is(err, ErrClosed) {
		t.Errorf("Encode after Close: %v", err)
	}
}

// NewEncoder refuses what Options.Validate refuses.
func TestNewEncoderValidates(t *testing.T) {
	for _, o := range []jpeg.Options{{}, {MaxEdge: 16, Quality: 1}, {MaxEdge: -1}, {MaxEdge: 10000}, {Quality: 101}} {
		_, nerr := NewEncoder(o)
		if err := o.Validate(); (nerr == nil) != (err == nil) {
			t.Errorf("NewEncoder(%+v) = %v, Validate = %v", o, nerr, err)
		}
	}
}

// estimateQuality finds the IJG quality whose scaled standard luminance table is the first
// quantisation table of a baseline JPEG (libjpeg's jpeg_set_quality with force_baseline).
func estimateQuality(b []byte) (int, bool) {
	table, ok := firstDQT(b)
	if !ok {
		return 0, false
	}
	slices.Sort(table)
	for q := 1; q <= 100; q++ {
		scale := 200 - 2*q
		if q < 50 {
			scale = 5000 / q
		}
		want := make([]int, 64)
		for i, v := range stdLuminance {
			want[i] = min(255, max(1, (v*scale+50)/100))
		}
		slices.Sort(want)
		if slices.Equal(want, table) {
			return q, true
		}
	}
	return 0, false
}

// firstDQT returns the 64 entries (in any order) of the first 8-bit quantisation table.
func firstDQT(b []byte) ([]int, bool) {
	for i := 2; i+4 <= len(b); {
		if b[i] != 0xFF {
			return nil, false
		}
		marker, n := b[i+1], int(binary.BigEndian.Uint16(b[i+2:]))
		if marker == 0xDB && i+4+65 <= len(b) && b[i+4]>>4 == 0 {
			t := make([]int, 64)
			for k := range t {
				t[k] = int(b[i+5+k])
			}
			return t, true
		}
		if marker == 0xDA {
			return nil, false
		}
		i += 2 + n
	}
	return nil, false
}

var stdLuminance = [64]int{
	16, 11, 10, 16, 24, 40, 51, 61,
	12, 12, 14, 19, 26, 58, 60, 55,
	14, 13, 16, 24, 40, 57, 69, 56,
	14, 17, 22, 29, 51, 87, 80, 62,
	18, 22, 37, 56, 68, 109, 103, 77,
	24, 35, 55, 64, 81, 104, 113, 92,
	49, 64, 78, 87, 103, 121, 120, 101,
	72, 92, 95, 98, 112, 100, 103, 99,
}

// The encoder calls libjpeg-turbo itself (jpegenc.c) where OpenCV's imencode converts every
// row to RGB first: the JPEG must come out byte for byte as OpenCV's, for BGR, grey and BGRA
// frames, and for a region of a larger frame (rows further apart than the region is wide).
func TestEncodeMatchesOpenCV(t *testing.T) {
	src := testFrame(t, 640, 480)
	grey, bgra := greyAndBGRA(t, src)
	region := src.Region(image.Rect(100, 60, 420, 300))
	defer region.Close()
	if region.IsContinuous() {
		t.Fatal("the region is continuous: it would not test the row stride")
	}
	for _, quality := range []int{80, 35} {
		e := newEncoder(t, jpeg.Options{Quality: quality})
		for name, m := range map[string]gocv.Mat{"bgr": src, "grey": grey, "bgra": bgra, "region": region} {
			got, err := e.Encode(m)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want, err := gocv.IMEncodeWithParams(gocv.JPEGFileExt, m, []int{gocv.IMWriteJpegQuality, quality})
			if err != nil {
				t.Fatalf("%s: OpenCV: %v", name, err)
			}
			if !bytes.Equal(got, want.GetBytes()) {
				t.Errorf("%s at quality %d: %d bytes, OpenCV's %d, not the same", name, quality, len(got), want.Len())
			}
			want.Close()
		}
	}
}
