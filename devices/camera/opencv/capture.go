package opencv

/*
#cgo !windows pkg-config: opencv4
#cgo CXXFLAGS: --std=c++11
#include <stdlib.h>
#include "capture.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"gocv.io/x/gocv"

	"github.com/omnisat/omnisat/devices/camera"
)

// OpenCV's VideoCapture API preferences and properties used here (opencv2/videoio.hpp, 4.6).
const (
	apiAny       = 0
	apiV4L2      = 200
	apiGStreamer = 1800
	apiFFmpeg    = 1900

	propFrameWidth  = 3
	propFrameHeight = 4
	propFPS         = 5
	propBufferSize  = 38
)

// capture is one cv::VideoCapture. It is not safe for concurrent use: the grabber goroutine
// owns it.
type capture struct {
	p C.CamCapture
}

// openCapture opens src with OpenCV. The error says why without repeating the source.
func openCapture(src camera.Source) (*capture, error) {
	c := &capture{p: C.cam_new()}
	api := apiFor(src.Kind)
	var r C.int
	if src.Kind == camera.SourceIndex {
		r = C.cam_open_index(c.p, C.int(src.Index), C.int(api))
	} else {
		curi := C.CString(src.URI)
		r = C.cam_open(c.p, curi, C.int(api))
		C.free(unsafe.Pointer(curi))
	}
	if r != 1 {
		err := c.err(r, fmt.Sprintf("OpenCV (%s backend) could not open it", apiName(api)))
		c.close()
		return nil, err
	}
	return c, nil
}

// apiFor is the OpenCV backend for a kind of source.
func apiFor(k camera.SourceKind) int {
	switch k {
	case camera.SourceIndex, camera.SourceDevice:
		return apiV4L2
	case camera.SourceFile:
		return apiFFmpeg
	case camera.SourcePipeline:
		return apiGStreamer
	}
	return apiAny
}

func apiName(api int) string {
	switch api {
	case apiV4L2:
		return "V4L2"
	case apiGStreamer:
		return "GStreamer"
	case apiFFmpeg:
		return "FFmpeg"
	}
	return "any"
}

func (c *capture) err(r C.int, otherwise string) error {
	if r == -1 {
		return fmt.Errorf("OpenCV error: %s", C.GoString(C.cam_error(c.p)))
	}
	return errors.New(otherwise)
}

// set asks for a property; backends may ignore it, so the result is only worth logging.
func (c *capture) set(prop int, v float64) bool {
	return C.cam_set(c.p, C.int(prop), C.double(v)) == 1
}

func (c *capture) get(prop int) float64 {
	return float64(C.cam_get(c.p, C.int(prop)))
}

// grab and retrieve are the grabber thread's two steps (grabber.cpp) as calls from Go, for
// BenchmarkFileFrame's per-frame figures.
//
// grab takes the next frame from the device or stream without converting it: for a V4L2
// camera that is a buffer dequeue (MJPEG stays undecoded); for the FFmpeg backend the packet
// is decoded but not converted to BGR. It reports false when no frame came.
func (c *capture) grab() (bool, error) {
	switch r := C.cam_grab(c.p); r {
	case 1:
		return true, nil
	case 0:
		return false, nil
	default:
		return false, c.err(r, "")
	}
}

// retrieve decodes/converts the last grabbed frame into m (BGR), reusing m's memory when the
// size is unchanged.
func (c *capture) retrieve(m *gocv.Mat) error {
	if r := C.cam_retrieve(c.p, unsafe.Pointer(m.Ptr())); r != 1 {
		return c.err(r, "no image in the grabbed frame")
	}
	return nil
}

// close releases the device; closing twice is harmless.
func (c *capture) close() {
	if c != nil && c.p != nil {
		C.cam_free(c.p)
		c.p = nil
	}
}
