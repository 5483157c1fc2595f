// A JPEG encoder on libjpeg-turbo that takes OpenCV's BGR rows as they are (see encoder.go).
#ifndef OMNISAT_CAMERA_JPEGENC_H
#define OMNISAT_CAMERA_JPEGENC_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct omnisatJpeg omnisatJpeg;

omnisatJpeg* omnisat_jpeg_new(void);
void omnisat_jpeg_free(omnisatJpeg* e);
// omnisat_jpeg_encode compresses an 8-bit image of 1 (grey), 3 (BGR) or 4 (BGRA) channels,
// rows stride bytes apart, at quality (1-100, 4:2:0 chroma). It returns 1 and sets *out and
// *size to the encoder's own buffer (valid until the next call), or 0 with the message in
// omnisat_jpeg_error.
int omnisat_jpeg_encode(omnisatJpeg* e, const unsigned char* pixels, int width, int height, int stride,
	int channels, int quality, const unsigned char** out, unsigned long* size);
const char* omnisat_jpeg_error(omnisatJpeg* e);

#ifdef __cplusplus
}
#endif

#endif
