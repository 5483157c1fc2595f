package camera

import "image"

// Info describes a V4L2 video capture device.
type Info struct {
	Path    string   // /dev/videoN
	Name    string   // the card name, e.g. "HD Pro Webcam C920"
	Driver  string   // e.g. "uvcvideo", "unicam"
	Bus     string   // e.g. "usb-0000:01:00.0-1.3"
	Formats []Format // capture formats, in the driver's order of preference
}

// Format is one pixel format a device offers and the frame sizes it offers it at.
type Format struct {
	FourCC      string // e.g. "MJPG", "YUYV"
	Description string // e.g. "Motion-JPEG"
	Compressed  bool
	// Sizes are the discrete frame sizes. Devices with a range of sizes report it in Min, Max
	// and Step instead (Sizes is then empty).
	Sizes          []image.Point
	Min, Max, Step image.Point
}

// List returns the V4L2 video capture devices (/dev/video*) with the formats and frame sizes
// they report. Nodes that are not capture devices (metadata, codecs, ISP outputs) are left out.
// No devices is an empty list, not an error.
func List() ([]Info, error) {
	return listDevices("/dev/video*")
}
