// A minimal C interface to cv::VideoCapture with what gocv v0.31 lacks: grab() and retrieve()
// as separate calls that report success, and C++ exceptions turned into error strings.
#ifndef OMNISAT_CAMERA_CAPTURE_H
#define OMNISAT_CAMERA_CAPTURE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef void* CamCapture;

CamCapture cam_new(void);
void cam_free(CamCapture c);
// The calls below return 1 on success, 0 on failure, -1 when OpenCV threw (see cam_error).
int cam_open(CamCapture c, const char* uri, int api);
int cam_open_index(CamCapture c, int index, int api);
int cam_set(CamCapture c, int prop, double value);
double cam_get(CamCapture c, int prop);
int cam_grab(CamCapture c);
// mat is a cv::Mat* (gocv.Mat.Ptr()).
int cam_retrieve(CamCapture c, void* mat);
const char* cam_error(CamCapture c);

#ifdef __cplusplus
}
#endif

#endif
