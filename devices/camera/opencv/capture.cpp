#include <string>
#include <exception>
#include <opencv2/core.hpp>
#include <opencv2/videoio.hpp>
#include "capture.h"

namespace {
struct Cam {
    cv::VideoCapture cap;
    std::string err;
};

template <typename F>
int guarded(Cam* c, F f) {
    try {
        c->err.clear();
        return f() ? 1 : 0;
    } catch (const std::exception& e) {
        c->err = e.what();
    } catch (...) {
        c->err = "unknown C++ exception";
    }
    return -1;
}
}  // namespace

extern "C" {

CamCapture cam_new(void) { return new Cam(); }

void cam_free(CamCapture p) {
    Cam* c = static_cast<Cam*>(p);
    try {
        c->cap.release();
    } catch (...) {
    }
    delete c;
}

int cam_open(CamCapture p, const char* uri, int api) {
    Cam* c = static_cast<Cam*>(p);
    return guarded(c, [&] { return c->cap.open(uri, api); });
}

int cam_open_index(CamCapture p, int index, int api) {
    Cam* c = static_cast<Cam*>(p);
    return guarded(c, [&] { return c->cap.open(index, api); });
}

int cam_set(CamCapture p, int prop, double value) {
    Cam* c = static_cast<Cam*>(p);
    return guarded(c, [&] { return c->cap.set(prop, value); });
}

double cam_get(CamCapture p, int prop) {
    Cam* c = static_cast<Cam*>(p);
    try {
        return c->cap.get(prop);
    } catch (...) {
        return 0;
    }
}

int cam_grab(CamCapture p) {
    Cam* c = static_cast<Cam*>(p);
    return guarded(c, [&] { return c->cap.grab(); });
}

int cam_retrieve(CamCapture p, void* mat) {
    Cam* c = static_cast<Cam*>(p);
    cv::Mat* m = static_cast<cv::Mat*>(mat);
    return guarded(c, [&] { return c->cap.retrieve(*m) && !m->empty(); });
}

const char* cam_error(CamCapture p) { return static_cast<Cam*>(p)->err.c_str(); }

}  // extern "C"
