package opencv

/*
#cgo LDFLAGS: -ljpeg
#include "capture.h"
#include "jpegenc.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"image"
	"unsafe"

	"gocv.io/x/gocv"

	"github.com/omnisat/omnisat/pipeline/jpeg"
)

// The JPEG is libjpeg-turbo's, called directly on the Mat's BGR rows (jpegenc.c), the library
// OpenCV encodes with too: OpenCV 4.6 first copies every row from BGR to RGB with a plain loop,
// a fifth of its encode at 640×480. OpenCV does the shrinking. Both were chosen over
// image/jpeg for speed on the boards omnisat runs on (OpenCV's encode 0.65 ms against 3.8 ms
// for a 640×480 frame at quality 80).

// Encoder shrinks and encodes frames. It keeps its resize buffer between calls, so encoding
// frames of one size allocates no OpenCV image per frame. An Encoder is not safe for concurrent
// use: give each goroutine its own.
type Encoder struct {
	opts    jpeg.Options
	resized gocv.Mat
	jpg     *C.omnisatJpeg
	closed  bool
}

// ErrClosed is returned by Encode after Close.
var ErrClosed = errors.New("jpeg encoder is closed")

// NewEncoder returns a JPEG encoder for o (zero fields take their defaults).
func NewEncoder(o jpeg.Options) (*Encoder, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("new jpeg encoder: %w", err)
	}
	o = o.WithDefaults()
	jpg := C.omnisat_jpeg_new()
	if jpg == nil {
		return nil, errors.New("new jpeg encoder: libjpeg could not start")
	}
	return &Encoder{opts: o, resized: gocv.NewMat(), jpg: jpg}, nil
}

// Options returns the settings in use, defaults filled in.
func (e *Encoder) Options() jpeg.Options { return e.opts }

// Encode shrinks src if needed and encodes it as a JPEG. src must be an 8-bit image with 1
// (grey), 3 (BGR, as OpenCV captures) or 4 (BGRA) channels. The returned slice belongs to the
// caller; src is not changed.
func (e *Encoder) Encode(src gocv.Mat) ([]byte, error) {
	if e.closed {
		return nil, ErrClosed
	}
	if err := check(src); err != nil {
		return nil, fmt.Errorf("encode jpeg: %w", err)
	}
	w, h := src.Cols(), src.Rows()
	img := src
	if ow, oh := jpeg.OutputSize(w, h, e.opts.MaxEdge); ow != w || oh != h {
		// INTER_AREA is OpenCV's advice for shrinking (no moiré); at 2:1 it takes a fast path.
		gocv.Resize(src, &e.resized, image.Pt(ow, oh), 0, 0, gocv.InterpolationArea)
		img = e.resized
	}
	var stride C.int
	pixels := C.cam_mat_pixels(unsafe.Pointer(img.Ptr()), &stride)
	var out *C.uchar
	var n C.ulong
	if C.omnisat_jpeg_encode(e.jpg, pixels, C.int(img.Cols()), C.int(img.Rows()), stride,
		C.int(img.Channels()), C.int(e.opts.Quality), &out, &n) != 1 {
		return nil, fmt.Errorf("encode jpeg %dx%d: %s", img.Cols(), img.Rows(), C.GoString(C.omnisat_jpeg_error(e.jpg)))
	}
	if n == 0 {
		return nil, fmt.Errorf("encode jpeg %dx%d: libjpeg produced no bytes", img.Cols(), img.Rows())
	}
	return C.GoBytes(unsafe.Pointer(out), C.int(n)), nil
}

// check rejects what OpenCV would throw on (a C++ exception aborts the whole process).
func check(m gocv.Mat) error {
	if m.Ptr() == nil {
		return errors.New("the frame is a closed Mat")
	}
	if m.Empty() {
		return errors.New("the frame is empty")
	}
	if d := len(m.Size()); d != 2 {
		return fmt.Errorf("the frame has %d dimensions, want 2", d)
	}
	switch m.Type() {
	case gocv.MatTypeCV8UC1, gocv.MatTypeCV8UC3, gocv.MatTypeCV8UC4:
		return nil
	}
	return fmt.Errorf("the frame's type is %v, want 8-bit with 1, 3 or 4 channels", m.Type())
}

// Close releases the resize buffer. Closing twice is harmless.
func (e *Encoder) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	C.omnisat_jpeg_free(e.jpg)
	e.jpg = nil
	return e.resized.Close()
}
