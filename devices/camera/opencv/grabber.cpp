// The camera's grab loop as a thread of its own (see camera.go for why), and the encoder it and
// Encoder share.
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <exception>
#include <new>
#include <string>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "grabber.h"
#include "jpegenc.h"

struct CamEncoder {
    omnisatJpeg* jpg;
    cv::Mat resized;
    int max_edge, quality;
    char err[512];
};

extern "C" {

void cam_output_size(int w, int h, int max_edge, int* ow, int* oh) {
    int lng = w > h ? w : h;
    if (lng <= max_edge || lng <= 0) {
        *ow = w;
        *oh = h;
        return;
    }
    double scale = (double)max_edge / (double)lng;
    int x = (int)((double)w * scale + 0.5), y = (int)((double)h * scale + 0.5);
    x = x < 1 ? 1 : x;
    y = y < 1 ? 1 : y;
    *ow = x < max_edge ? x : max_edge;
    *oh = y < max_edge ? y : max_edge;
}

CamEncoder* cam_encoder_new(int max_edge, int quality) {
    CamEncoder* e = new (std::nothrow) CamEncoder();
    if (!e)
        return nullptr;
    e->jpg = omnisat_jpeg_new();
    if (!e->jpg) {
        delete e;
        return nullptr;
    }
    e->max_edge = max_edge;
    e->quality = quality;
    return e;
}

void cam_encoder_free(CamEncoder* e) {
    if (!e)
        return;
    omnisat_jpeg_free(e->jpg);
    delete e;
}

const char* cam_encoder_error(CamEncoder* e) { return e->err; }

int cam_encode(CamEncoder* e, void* mat, const unsigned char** out, unsigned long* size) {
    e->err[0] = 0;
    const cv::Mat* img = static_cast<const cv::Mat*>(mat);
    int ch = img->channels();
    if (img->empty() || img->dims != 2 || img->depth() != CV_8U || (ch != 1 && ch != 3 && ch != 4)) {
        snprintf(e->err, sizeof e->err, "encode jpeg: the frame is not a 2-D 8-bit image of 1, 3 or 4 channels");
        return 0;
    }
    int ow, oh;
    cam_output_size(img->cols, img->rows, e->max_edge, &ow, &oh);
    try {
        if (ow != img->cols || oh != img->rows) {
            // INTER_AREA is OpenCV's advice for shrinking (no moiré); at 2:1 it takes a fast path.
            cv::resize(*img, e->resized, cv::Size(ow, oh), 0, 0, cv::INTER_AREA);
            img = &e->resized;
        }
    } catch (const std::exception& x) {
        snprintf(e->err, sizeof e->err, "shrink to %dx%d: OpenCV error: %s", ow, oh, x.what());
        return 0;
    }
    if (omnisat_jpeg_encode(e->jpg, img->data, img->cols, img->rows, static_cast<int>(img->step[0]), ch,
                            e->quality, out, size) != 1) {
        snprintf(e->err, sizeof e->err, "encode jpeg %dx%d: %s", img->cols, img->rows, omnisat_jpeg_error(e->jpg));
        return 0;
    }
    if (*size == 0) {
        snprintf(e->err, sizeof e->err, "encode jpeg %dx%d: libjpeg produced no bytes", img->cols, img->rows);
        return 0;
    }
    return 1;
}

}  // extern "C"

namespace {

struct Grabber {
    CamCapture cap;
    CamEncoder* enc;
    CamSchedule* sched;
    int stopfd;
    std::string loop_file;  // empty: no loop
    int api;
    cv::Mat frame;
    pthread_t thread;
};

int64_t monotonic() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

// stopped waits until the monotonic time until (0: only looks) or until stopfd is readable,
// and says whether it is.
bool stopped(int stopfd, int64_t until) {
    struct pollfd p = {stopfd, POLLIN, 0};
    for (;;) {
        int64_t left = until - monotonic();
        struct timespec t = {0, 0};
        if (left > 0) {
            t.tv_sec = left / 1000000000;
            t.tv_nsec = left % 1000000000;
        }
        int r = ppoll(&p, 1, &t, nullptr);
        if (r > 0)
            return true;
        if (r == 0)
            return false;
        if (errno != EINTR)
            return true;  // cannot wait: better stop than spin
    }
}

void post(CamGrabber* g) {
    uint64_t one = 1;
    ssize_t n = write(g->readyfd, &one, sizeof one);
    (void)n;  // a full counter (2^64 - 2 posts) still wakes Go
}

void* end(CamGrabber* g, int how, const char* msg) {
    if (msg)
        snprintf(g->err, sizeof g->err, "%s", msg);
    __atomic_store_n(&g->ended, how, __ATOMIC_RELEASE);
    post(g);
    return nullptr;
}

// fail ends the thread after an OpenCV call that threw (r < 0: its message, as the Go side's
// calls say it) or refused (the reason given).
void* fail(CamGrabber* g, int how, CamCapture cap, int r, const char* refused) {
    char msg[sizeof g->err];
    if (r < 0)
        snprintf(msg, sizeof msg, "OpenCV error: %s", cam_error(cap));
    else
        snprintf(msg, sizeof msg, "%s", refused);
    return end(g, how, msg);
}

// emit writes an encoded frame to g->outfd as a frame message of the camera stream, after an
// up message when it is the thread's first, waiting for room (a non-blocking pipe) in poll
// with stopfd. It returns CAM_RUNNING, or how the thread ends: CAM_STOPPED, or
// CAM_OUTPUT_FAILED with errnum and err set (EPIPE: the reader is gone).
int emit(CamGrabber* g, int stopfd, const unsigned char* jpeg, unsigned long size) {
    unsigned char up[5] = {'U', 0, 0, 0, 0};
    unsigned char head[5] = {'F', (unsigned char)(size >> 24), (unsigned char)(size >> 16),
                             (unsigned char)(size >> 8), (unsigned char)size};
    struct iovec iov[3];
    int n = 0;
    if (g->written == 0)
        iov[n++] = {up, sizeof up};
    iov[n++] = {head, sizeof head};
    iov[n++] = {const_cast<unsigned char*>(jpeg), size};
    struct iovec* v = iov;
    while (n > 0) {
        ssize_t k = writev(g->outfd, v, n);
        if (k < 0 && errno == EAGAIN) {
            struct pollfd p[2] = {{g->outfd, POLLOUT, 0}, {stopfd, POLLIN, 0}};
            if (poll(p, 2, -1) < 0 && errno != EINTR)
                k = -1;  // cannot wait: fail below with poll's errno
            else if (p[1].revents)
                return CAM_STOPPED;
            else
                continue;  // room, or an error the next write reports
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            g->errnum = errno;
            snprintf(g->err, sizeof g->err, "write the frame: %s", strerror(errno));
            return CAM_OUTPUT_FAILED;
        }
        for (; n > 0 && (size_t)k >= v->iov_len; v++, n--)
            k -= (ssize_t)v->iov_len;
        if (n > 0) {
            v->iov_base = static_cast<unsigned char*>(v->iov_base) + k;
            v->iov_len -= (size_t)k;
        }
    }
    __atomic_store_n(&g->written, g->written + 1, __ATOMIC_RELEASE);
    if (g->written == 1)
        post(g);  // Go hears once that the camera delivers
    return CAM_RUNNING;
}

// run grabs every frame the source delivers (so that its queue never holds stale images),
// pacing a file at its frame rate, and retrieves and encodes one whenever one is due and Go has
// taken the last. Go hears from it only then, and when it ends. With an outfd it writes the
// frames there itself, and Go hears from it after the first and when it ends.
void* run(void* arg) {
    // Signals for the process (SIGTERM, SIGINT) go to Go's threads, not through a C thread.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    CamGrabber* g = static_cast<CamGrabber*>(arg);
    Grabber* in = static_cast<Grabber*>(g->impl);
    CamSchedule* s = in->sched;
    for (;;) {
        int64_t due = 0;
        if (s->pace_ns > 0) {
            int64_t now = monotonic();
            if (s->pace_start == 0 || now - (s->pace_start + s->pace_n * s->pace_ns) > 1000000000) {
                s->pace_start = now;  // far behind (a stall), or the first frame: count from here
                s->pace_n = 0;
            }
            due = s->pace_start + s->pace_n * s->pace_ns;
            s->pace_n++;
        }
        if (stopped(in->stopfd, due))
            return end(g, CAM_STOPPED, nullptr);
        int r = cam_grab(in->cap);
        if (r < 0)
            return fail(g, CAM_GRAB_FAILED, in->cap, r, nullptr);
        if (r == 0 && !in->loop_file.empty() && g->grabbed > 0) {
            // The end of the file: play it again. Reopening (rather than seeking) notices a
            // file that has been deleted or replaced.
            struct stat st;
            if (stat(in->loop_file.c_str(), &st) != 0) {
                g->errnum = errno;
                return end(g, CAM_REOPEN_FAILED, strerror(errno));
            }
            r = cam_open(in->cap, in->loop_file.c_str(), in->api);
            if (r != 1)
                return fail(g, CAM_REOPEN_FAILED, in->cap, r, "OpenCV (FFmpeg backend) could not open it");
            __atomic_store_n(&g->grabbed, 0, __ATOMIC_RELAXED);
            continue;
        }
        if (r == 0)
            return end(g, CAM_END, nullptr);
        __atomic_store_n(&g->grabbed, g->grabbed + 1, __ATOMIC_RELAXED);
        int64_t now = monotonic();
        if (now < s->next_encode || __atomic_load_n(&g->frame_ready, __ATOMIC_ACQUIRE))
            continue;  // drop it undecoded
        r = cam_retrieve(in->cap, &in->frame);
        if (r != 1)
            return fail(g, CAM_DECODE_FAILED, in->cap, r, "no image in the grabbed frame");
        const unsigned char* out;
        unsigned long size;
        if (cam_encode(in->enc, &in->frame, &out, &size) != 1)
            return end(g, CAM_ENCODE_FAILED, cam_encoder_error(in->enc));
        if (g->outfd >= 0) {
            int how = emit(g, in->stopfd, out, size);
            if (how != CAM_RUNNING)
                return end(g, how, nullptr);
        } else {
            g->jpeg = out;
            g->size = size;
            __atomic_store_n(&g->frame_ready, 1, __ATOMIC_RELEASE);
            post(g);
        }
        // Keep to the rate on average (the next due time moves by whole intervals), without
        // bursts after a stall.
        s->next_encode = s->next_encode == 0 ? now : s->next_encode;
        s->next_encode += s->interval_ns;
        if (s->next_encode < now)
            s->next_encode = now + s->interval_ns;
    }
}

}  // namespace

extern "C" {

CamGrabber* cam_grabber_start(CamCapture cap, CamEncoder* enc, CamSchedule* sched, int stopfd,
                               const char* loop_file, int api, int outfd) {
    CamGrabber* g = new (std::nothrow) CamGrabber();
    Grabber* in = new (std::nothrow) Grabber();
    if (!g || !in) {
        delete g;
        delete in;
        return nullptr;
    }
    in->cap = cap;
    in->enc = enc;
    in->sched = sched;
    in->stopfd = stopfd;
    try {
        in->loop_file = loop_file ? loop_file : "";
    } catch (...) {
        delete in;
        delete g;
        return nullptr;
    }
    in->api = api;
    g->outfd = outfd;
    g->impl = in;
    g->readyfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (g->readyfd < 0 || pthread_create(&in->thread, nullptr, run, g) != 0) {
        if (g->readyfd >= 0)
            close(g->readyfd);
        delete in;
        delete g;
        return nullptr;
    }
    pthread_setname_np(in->thread, "omnisat-grab");  // what top -H and /proc show for it
    return g;
}

void cam_grabber_free(CamGrabber* g) {
    if (!g)
        return;
    Grabber* in = static_cast<Grabber*>(g->impl);
    pthread_join(in->thread, nullptr);
    delete in;
    delete g;
}

}  // extern "C"
