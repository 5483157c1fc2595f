package opencv

/*
#cgo LDFLAGS: -ljpeg
#include "grabber.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"gocv.io/x/gocv"

	"github.com/omnisat/omnisat/pipeline/jpeg"
)

// The JPEG is libjpeg-turbo's, called directly on the Mat's BGR rows (jpegenc.c), the library
// OpenCV encodes with too: OpenCV 4.6 first copies every row from BGR to RGB with a plain loop,
// a fifth of its encode at 640×480. OpenCV does the shrinking (grabber.cpp: cam_encode, which
// the camera's grabber thread calls too). Both were chosen over image/jpeg for speed on the
// boards omnisat runs on (OpenCV's encode 0.65 ms against 3.8 ms for a 640×480 frame at
// quality 80).

// Encoder shrinks and encodes frames. It keeps its resize and output buffers between calls, so
// encoding frames of one size allocates no OpenCV image per frame. An Encoder is not safe for
// concurrent use: give each goroutine its own.
type Encoder struct {
	opts   jpeg.Options
	c      *C.CamEncoder
	closed bool
}

// ErrClosed is returned by Encode after Close.
var ErrClosed = errors.New("jpeg encoder is closed")

// NewEncoder returns a JPEG encoder for o (zero fields take their defaults).
func NewEncoder(o jpeg.Options) (*Encoder, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("new jpeg encoder: %w", err)
	}
	o = o.WithDefaults()
	c := C.cam_encoder_new(C.int(o.MaxEdge), C.int(o.Quality))
	if c == nil {
		return nil, errors.New("new jpeg encoder: libjpeg could not start")
	}
	return &Encoder{opts: o, c: c}, nil
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
	var out *C.uchar
	var n C.ulong
	if C.cam_encode(e.c, unsafe.Pointer(src.Ptr()), &out, &n) != 1 {
		return nil, errors.New(C.GoString(C.cam_encoder_error(e.c)))
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

// Close releases the buffers. Closing twice is harmless.
func (e *Encoder) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	C.cam_encoder_free(e.c)
	e.c = nil
	return nil
}
