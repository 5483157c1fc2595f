// The camera's encoder and its grabber thread (grabber.cpp; why in camera.go).
#ifndef OMNISAT_CAMERA_GRABBER_H
#define OMNISAT_CAMERA_GRABBER_H

#include <stdint.h>
#include "capture.h"

#ifdef __cplusplus
extern "C" {
#endif

// An encoder shrinks an OpenCV image to fit max_edge (INTER_AREA) and compresses it with
// jpegenc.c, keeping its shrink and output buffers from frame to frame.
typedef struct CamEncoder CamEncoder;

CamEncoder* cam_encoder_new(int max_edge, int quality);
void cam_encoder_free(CamEncoder* e);
// cam_encode encodes mat (a cv::Mat*: 2-D, 8-bit, 1, 3 or 4 channels). It returns 1 and sets
// *out and *size to the encoder's buffer (valid until its next call), or 0 with the message in
// cam_encoder_error.
int cam_encode(CamEncoder* e, void* mat, const unsigned char** out, unsigned long* size);
const char* cam_encoder_error(CamEncoder* e);
// cam_output_size is jpeg.OutputSize (pipeline/jpeg), which it must match.
void cam_output_size(int w, int h, int max_edge, int* ow, int* oh);

// Where a grabber thread keeps its time from one capture to the next (a file reopened to
// loop): frame n of a file is due at pace_start + n * pace_ns, and the next frame to encode is
// the first grabbed at or after next_encode (CLOCK_MONOTONIC, ns). Zeroed: start now.
typedef struct {
	int64_t pace_ns;     // 0: no pacing (a device or stream delivers at its own rate)
	int64_t interval_ns; // between encoded frames
	int64_t pace_start, pace_n, next_encode;
} CamSchedule;

// How a grabber thread ended (CamGrabber.ended).
enum {
	CAM_RUNNING = 0,
	CAM_STOPPED = 1,     // stopfd became readable
	CAM_END = 2,         // grab found no frame: the end of a file, or the device is gone
	CAM_GRAB_FAILED = 3, // OpenCV threw in grab (err)
	CAM_DECODE_FAILED = 4,
	CAM_ENCODE_FAILED = 5,
	CAM_REOPEN_FAILED = 6, // a file that ended could not be opened again to loop (err)
	CAM_OUTPUT_FAILED = 7, // writing to outfd failed (err; errnum: the write's errno)
};

// A grabber thread owns a capture, its encoder and a schedule while it runs. The fields up to
// readyfd are what Go reads without calling into C: the thread stores frame_ready (after jpeg
// and size) and ended (after err and grabbed) with release and then bumps readyfd, an eventfd
// Go sleeps on; Go loads them with acquire, and stores frame_ready = 0 once it has copied the
// frame, which lets the thread encode the next one.
//
// With an outfd (not -1) the thread writes each frame there itself instead, as a message of
// package camera's stream (devices/camera/stream.go), with an up message before the first
// one: Go never touches the frames and hears from the thread only after that first frame
// (written becomes 1) and when it ends.
typedef struct {
	int32_t frame_ready;
	int32_t ended;
	const unsigned char* jpeg;
	uint64_t size;
	int64_t grabbed; // frames grabbed from this capture
	int64_t written; // frames written to outfd
	char err[512];
	int32_t errnum; // CAM_REOPEN_FAILED: stat's errno, 0 when the file was there; CAM_OUTPUT_FAILED: write's
	int readyfd;
	int outfd;
	void* impl;
} CamGrabber;

// cam_grabber_start starts the thread (NULL when it cannot: no memory, no thread). The
// capture, encoder and schedule must outlive it; stopfd is polled, never read or closed. With
// a loop_file (NULL: none), a capture that ends after delivering frames is opened again on
// that file with the api given, so that the file plays in a loop. outfd (-1: none) is where
// it writes the frames itself (see CamGrabber); it may be non-blocking, and is never closed.
CamGrabber* cam_grabber_start(CamCapture cap, CamEncoder* enc, CamSchedule* sched, int stopfd,
	const char* loop_file, int api, int outfd);
// cam_grabber_free waits for the thread to end (call it once ended is set) and frees it;
// readyfd belongs to Go's file by then.
void cam_grabber_free(CamGrabber* g);

#ifdef __cplusplus
}
#endif

#endif
