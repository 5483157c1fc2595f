// libjpeg-turbo compresses OpenCV's BGR rows directly (JCS_EXT_BGR): OpenCV 4.6's own encoder
// first copies every row to RGB with a plain loop, a fifth of its time at 640x480. One
// compressor is kept and reused, with its output buffer, so that a frame allocates nothing
// once the buffer has grown to the largest frame.
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>
#include <jerror.h>
#include "jpegenc.h"

struct omnisatJpeg {
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr err;
	struct jpeg_destination_mgr dest;
	jmp_buf jump;
	char msg[JMSG_LENGTH_MAX];
	unsigned char* buf; // the output, grown by doubling and kept for the next frame
	size_t cap;
};

// fail replaces libjpeg's error_exit, which would end the process.
static void fail(j_common_ptr c) {
	omnisatJpeg* e = (omnisatJpeg*)c->client_data;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jump, 1);
}

static boolean dest_grow(j_compress_ptr c);

// dest_init starts at the beginning of the buffer, which must not be empty: libjpeg stores a
// byte before it looks at the room left.
static void dest_init(j_compress_ptr c) {
	omnisatJpeg* e = (omnisatJpeg*)c->client_data;
	e->dest.next_output_byte = e->buf;
	e->dest.free_in_buffer = e->cap;
	if (e->cap == 0)
		dest_grow(c);
}

// dest_grow doubles the buffer when libjpeg has filled it.
static boolean dest_grow(j_compress_ptr c) {
	omnisatJpeg* e = (omnisatJpeg*)c->client_data;
	size_t used = e->cap, next = e->cap ? 2 * e->cap : 64 * 1024;
	unsigned char* b = realloc(e->buf, next);
	if (!b)
		ERREXIT(c, JERR_OUT_OF_MEMORY);
	e->buf = b;
	e->cap = next;
	e->dest.next_output_byte = b + used;
	e->dest.free_in_buffer = next - used;
	return TRUE;
}

static void dest_term(j_compress_ptr c) { (void)c; }

omnisatJpeg* omnisat_jpeg_new(void) {
	omnisatJpeg* e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->c.err = jpeg_std_error(&e->err);
	e->err.error_exit = fail;
	e->c.client_data = e;
	if (setjmp(e->jump)) {
		jpeg_destroy_compress(&e->c);
		free(e);
		return NULL;
	}
	jpeg_create_compress(&e->c);
	e->dest.init_destination = dest_init;
	e->dest.empty_output_buffer = dest_grow;
	e->dest.term_destination = dest_term;
	e->c.dest = &e->dest;
	return e;
}

void omnisat_jpeg_free(omnisatJpeg* e) {
	if (!e)
		return;
	jpeg_destroy_compress(&e->c);
	free(e->buf);
	free(e);
}

const char* omnisat_jpeg_error(omnisatJpeg* e) { return e->msg; }

int omnisat_jpeg_encode(omnisatJpeg* e, const unsigned char* pixels, int width, int height, int stride,
		int channels, int quality, const unsigned char** out, unsigned long* size) {
	J_COLOR_SPACE space;
	switch (channels) {
	case 1: space = JCS_GRAYSCALE; break;
	case 3: space = JCS_EXT_BGR; break;
	case 4: space = JCS_EXT_BGRX; break;
	default:
		snprintf(e->msg, sizeof(e->msg), "%d channels", channels);
		return 0;
	}
	if (setjmp(e->jump)) {
		jpeg_abort_compress(&e->c);
		return 0;
	}
	e->c.image_width = (JDIMENSION)width;
	e->c.image_height = (JDIMENSION)height;
	e->c.input_components = channels;
	e->c.in_color_space = space;
	jpeg_set_defaults(&e->c);
	jpeg_set_quality(&e->c, quality, TRUE);
	jpeg_start_compress(&e->c, TRUE);
	while (e->c.next_scanline < e->c.image_height) {
		JSAMPROW rows[16];
		JDIMENSION k = 0;
		for (; k < 16 && e->c.next_scanline + k < e->c.image_height; k++)
			rows[k] = (JSAMPROW)(pixels + (size_t)(e->c.next_scanline + k) * (size_t)stride);
		jpeg_write_scanlines(&e->c, rows, k);
	}
	jpeg_finish_compress(&e->c);
	*out = e->buf;
	*size = (unsigned long)(e->cap - e->dest.free_in_buffer);
	return 1;
}
