package camera

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// V4L2 structures and requests (linux/videodev2.h). The ioctl numbers are those of the generic
// encoding used by x86, arm and arm64.
type v4l2Capability struct {
	Driver       [16]byte
	Card         [32]byte
	BusInfo      [32]byte
	Version      uint32
	Capabilities uint32
	DeviceCaps   uint32
	Reserved     [3]uint32
}

type v4l2FmtDesc struct {
	Index       uint32
	Type        uint32
	Flags       uint32
	Description [32]byte
	PixelFormat uint32
	MbusCode    uint32
	Reserved    [3]uint32
}

type v4l2FrmSizeEnum struct {
	Index       uint32
	PixelFormat uint32
	Type        uint32
	Size        [6]uint32 // discrete: width, height; stepwise: min_w, max_w, step_w, min_h, max_h, step_h
	Reserved    [2]uint32
}

const (
	v4l2CapVideoCapture       = 0x00000001
	v4l2CapVideoCaptureMPlane = 0x00001000
	v4l2CapDeviceCaps         = 0x80000000
	v4l2BufTypeVideoCapture   = 1
	v4l2FmtFlagCompressed     = 0x0001
	v4l2FrmSizeTypeDiscrete   = 1
)

// ioctl requests: dir<<30 | size<<16 | 'V'<<8 | nr, with dir 2 = read, 3 = read/write.
const (
	vidiocQueryCap       = 2<<30 | uint(unsafe.Sizeof(v4l2Capability{}))<<16 | 'V'<<8 | 0
	vidiocEnumFmt        = 3<<30 | uint(unsafe.Sizeof(v4l2FmtDesc{}))<<16 | 'V'<<8 | 2
	vidiocEnumFrameSizes = 3<<30 | uint(unsafe.Sizeof(v4l2FrmSizeEnum{}))<<16 | 'V'<<8 | 74
)

func listDevices(pattern string) ([]Info, error) {
	paths, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("list cameras %q: %w", pattern, err)
	}
	slices.SortFunc(paths, func(a, b string) int { // video2 before video10
		if d := len(a) - len(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	infos := []Info{}
	var errs []error
	for _, p := range paths {
		info, ok, err := queryDevice(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			infos = append(infos, info)
		}
	}
	if len(infos) == 0 && len(errs) > 0 {
		return infos, errors.Join(errs...)
	}
	return infos, nil
}

// queryDevice reports ok=false for a node that is not a V4L2 capture device.
func queryDevice(path string) (Info, bool, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Info{}, false, fmt.Errorf("list cameras: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var cap v4l2Capability
	if err := ioctl(fd, vidiocQueryCap, unsafe.Pointer(&cap)); err != nil {
		if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
			return Info{}, false, nil // not a V4L2 device
		}
		return Info{}, false, fmt.Errorf("list cameras: query %s: %w", path, err)
	}
	caps := cap.Capabilities
	if caps&v4l2CapDeviceCaps != 0 {
		caps = cap.DeviceCaps
	}
	if caps&v4l2CapVideoCapture == 0 {
		return Info{}, false, nil // metadata, output or mem-to-mem node; multi-planar only (ISPs) too
	}
	info := Info{Path: path, Name: cstr(cap.Card[:]), Driver: cstr(cap.Driver[:]), Bus: cstr(cap.BusInfo[:])}
	for i := uint32(0); i < 256; i++ {
		d := v4l2FmtDesc{Index: i, Type: v4l2BufTypeVideoCapture}
		if ioctl(fd, vidiocEnumFmt, unsafe.Pointer(&d)) != nil {
			break // EINVAL: no more formats
		}
		f := Format{
			FourCC:      fourCC(d.PixelFormat),
			Description: cstr(d.Description[:]),
			Compressed:  d.Flags&v4l2FmtFlagCompressed != 0,
		}
		for j := uint32(0); j < 1024; j++ {
			s := v4l2FrmSizeEnum{Index: j, PixelFormat: d.PixelFormat}
			if ioctl(fd, vidiocEnumFrameSizes, unsafe.Pointer(&s)) != nil {
				break
			}
			if s.Type == v4l2FrmSizeTypeDiscrete {
				f.Sizes = append(f.Sizes, image.Pt(int(s.Size[0]), int(s.Size[1])))
				continue
			}
			f.Min = image.Pt(int(s.Size[0]), int(s.Size[3]))
			f.Max = image.Pt(int(s.Size[1]), int(s.Size[4]))
			f.Step = image.Pt(int(s.Size[2]), int(s.Size[5]))
			break // stepwise and continuous come alone
		}
		info.Formats = append(info.Formats, f)
	}
	return info, true, nil
}

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.ToValidUTF8(string(b), "?")
}

func fourCC(v uint32) string {
	b := []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			return "0x" + strconv.FormatUint(uint64(v), 16)
		}
		b[i] = c
	}
	return strings.TrimRight(string(b), " ")
}

// ioctl is unix.ioctlPtr, which x/sys does not export on Linux.
func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg)); e != 0 {
		return e
	}
	return nil
}
