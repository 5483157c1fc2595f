//go:build linux

package camera

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

func TestV4L2ABI(t *testing.T) {
	// The sizes and request numbers of linux/videodev2.h.
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof v4l2_capability", unsafe.Sizeof(v4l2Capability{}), 104},
		{"sizeof v4l2_fmtdesc", unsafe.Sizeof(v4l2FmtDesc{}), 64},
		{"sizeof v4l2_frmsizeenum", unsafe.Sizeof(v4l2FrmSizeEnum{}), 44},
		{"VIDIOC_QUERYCAP", uintptr(vidiocQueryCap), 0x80685600},
		{"VIDIOC_ENUM_FMT", uintptr(vidiocEnumFmt), 0xc0405602},
		{"VIDIOC_ENUM_FRAMESIZES", uintptr(vidiocEnumFrameSizes), 0xc02c564a},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
	if got := fourCC(0x47504A4D); got != "MJPG" {
		t.Errorf("fourCC(MJPG) = %q", got)
	}
	if got := fourCC(0x20203859); got != "Y8" {
		t.Errorf("fourCC(\"Y8  \") = %q", got)
	}
	if got := fourCC(1); got != "0x1" {
		t.Errorf("fourCC(1) = %q", got)
	}
}

func TestList(t *testing.T) {
	infos, err := List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if infos == nil {
		t.Fatal("List returned nil, want an empty list")
	}
	for _, in := range infos {
		t.Logf("%s: %s (%s, %s): %d formats", in.Path, in.Name, in.Driver, in.Bus, len(in.Formats))
	}

	// Nodes that are not V4L2 devices are left out, without an error.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "video0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	infos, err = listDevices(filepath.Join(dir, "video*"))
	if err != nil || len(infos) != 0 {
		t.Errorf("a regular file: %v, %v; want no devices and no error", infos, err)
	}
	if infos, err = listDevices(filepath.Join(dir, "none*")); err != nil || infos == nil || len(infos) != 0 {
		t.Errorf("no nodes: %v, %v; want an empty list", infos, err)
	}
}
