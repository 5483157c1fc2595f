package audio

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// DeviceInfo describes one PortAudio device.
type DeviceInfo struct {
	Index             int     // PortAudio's index, valid until PortAudio is re-initialised
	Name              string  // as PortAudio names it ("pulse", "USB Audio Device: - (hw:1,0)")
	HostAPI           string  // "ALSA", the one host API omnisat links (hostapis.c)
	MaxInputChannels  int     // 0: not an input
	MaxOutputChannels int     // 0: not an output
	DefaultSampleRate float64 // the device's native rate, Hz
	DefaultInput      bool    // the system's default input device
	DefaultOutput     bool    // the system's default output device
}

// String is one line for a device list.
func (d DeviceInfo) String() string {
	var def []string
	if d.DefaultInput {
		def = append(def, "default input")
	}
	if d.DefaultOutput {
		def = append(def, "default output")
	}
	s := fmt.Sprintf("%d %q (%s) in %d out %d %g Hz", d.Index, d.Name, d.HostAPI, d.MaxInputChannels, d.MaxOutputChannels, d.DefaultSampleRate)
	if len(def) > 0 {
		s += " [" + strings.Join(def, ", ") + "]"
	}
	return s
}

// List returns the devices PortAudio knows, in index order.
func List() ([]DeviceInfo, error) {
	if err := paAcquire(); err != nil {
		return nil, fmt.Errorf("list audio devices: %w", err)
	}
	defer paRelease()
	var out []DeviceInfo
	err := paDo(func() error {
		devs, in, outDev, err := paDevices()
		if err != nil {
			return err
		}
		out = convertDevices(devs, in, outDev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list audio devices: %w", err)
	}
	return out, nil
}

// Hold keeps PortAudio initialised until release is called, so that listing devices and then
// opening them costs one initialisation: PortAudio probes every device and ALSA plugin when it
// starts (on a machine with the ALSA plugins installed, a hundred libraries and ~100 ms of CPU
// on the development machine), and without a holder each List ends by terminating it again.
// Calling release more than once is fine.
//
// devices, when given, are the device strings (see Select) the process will open, input and
// output and their fallbacks: from then on PortAudio's initialisations leave out the ALSA
// plugin devices none of them can select (see probeOnly), and List lists only what is left.
// Select gives the same device for each of them either way. A device string that names a
// plugin device left out finds it only after a restart, or when its opener is PortAudio's only
// user (findDevice then probes everything again). `omnisat devices` declares nothing and sees
// every device.
func Hold(devices ...string) (release func(), err error) {
	if len(devices) > 0 {
		pa.mu.Lock()
		pa.declared = append([]string(nil), devices...)
		pa.mu.Unlock()
	}
	if err := paAcquire(); err != nil {
		return func() {}, fmt.Errorf("initialise audio devices: %w", err)
	}
	var once sync.Once
	return func() { once.Do(paRelease) }, nil
}

// convertDevices turns PortAudio's list into DeviceInfos.
func convertDevices(devs []paDevice, defIn, defOut int) []DeviceInfo {
	list := make([]DeviceInfo, 0, len(devs))
	for _, d := range devs {
		list = append(list, DeviceInfo{
			Index:             d.index,
			Name:              d.name,
			HostAPI:           d.hostAPI,
			MaxInputChannels:  d.maxIn,
			MaxOutputChannels: d.maxOut,
			DefaultSampleRate: d.rate,
			DefaultInput:      d.index == defIn,
			DefaultOutput:     d.index == defOut,
		})
	}
	return list
}

// Select finds the device a configuration string names, among devs, for input or output:
//
//   - "default" (or ""): the system's default device for that direction;
//   - a number: the device with that index;
//   - anything else: the first device whose name contains the string, ignoring case (a device
//     whose whole name matches wins over one that only contains it).
//
// Only devices with channels in the wanted direction count. When nothing matches, the error
// lists the devices that would have.
func Select(devs []DeviceInfo, spec string, input bool) (DeviceInfo, error) {
	dir := "output"
	if input {
		dir = "input"
	}
	usable := func(d DeviceInfo) bool {
		if input {
			return d.MaxInputChannels > 0
		}
		return d.MaxOutputChannels > 0
	}
	var names []string
	for _, d := range devs {
		if usable(d) {
			names = append(names, fmt.Sprintf("%d %q", d.Index, d.Name))
		}
	}
	available := "none"
	if len(names) > 0 {
		available = strings.Join(names, ", ")
	}
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "" || strings.EqualFold(spec, "default"):
		for _, d := range devs {
			if usable(d) && ((input && d.DefaultInput) || (!input && d.DefaultOutput)) {
				return d, nil
			}
		}
		return DeviceInfo{}, fmt.Errorf("find %s device %q: there is no default %s device (available: %s)", dir, spec, dir, available)
	case isNumber(spec):
		i, err := strconv.Atoi(spec)
		if err != nil {
			return DeviceInfo{}, fmt.Errorf("find %s device %q: %v", dir, spec, err)
		}
		for _, d := range devs {
			if d.Index == i {
				if !usable(d) {
					return DeviceInfo{}, fmt.Errorf("find %s device %q: device %d %q has no %s channels (available: %s)", dir, spec, i, d.Name, dir, available)
				}
				return d, nil
			}
		}
		return DeviceInfo{}, fmt.Errorf("find %s device %q: no device with index %d (available: %s)", dir, spec, i, available)
	}
	for _, d := range devs {
		if usable(d) && strings.EqualFold(d.Name, spec) {
			return d, nil
		}
	}
	low := strings.ToLower(spec)
	for _, d := range devs {
		if usable(d) && strings.Contains(strings.ToLower(d.Name), low) {
			return d, nil
		}
	}
	return DeviceInfo{}, fmt.Errorf("find %s device %q: no %s device name contains it (available: %s)", dir, spec, dir, available)
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// NotProbed is what is added to the error for a device string that may name a device the
// current, narrowed probe left out (see Hold and LeftOut).
const NotProbed = "ALSA plugin devices the configuration did not name at start-up are not probed while other devices are open; a restart probes them"

// LeftOut reports whether spec may select a device that PortAudio's current device list left
// out: the probe was narrowed (see Hold), and not for spec.
func LeftOut(spec string) bool {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	return pa.inited && probeLeftOut(spec)
}

// findDevice resolves spec against PortAudio's current list. Called under paDo.
func findDevice(spec string, input bool) (paDevice, error) {
	// An index counts every device: probe everything first, if nothing else uses PortAudio now.
	if pa.narrowed && isNumber(strings.TrimSpace(spec)) && !paProbeEverything() {
		return paDevice{}, fmt.Errorf("find device %q: a device index counts every device; %s", spec, NotProbed)
	}
	devs, defIn, defOut, err := paDevices()
	if err != nil {
		return paDevice{}, fmt.Errorf("list audio devices: %w", err)
	}
	d, err := Select(convertDevices(devs, defIn, defOut), spec, input)
	if err != nil && probeLeftOut(spec) {
		// Not a device string the probe was narrowed for: probe everything, if nothing else
		// uses PortAudio now. (One it was narrowed for is missing for another reason: a device
		// unplugged while recovering probes as narrowly as before.)
		if !paProbeEverything() {
			return paDevice{}, fmt.Errorf("%w; %s", err, NotProbed)
		}
		return findDevice(spec, input)
	}
	if err != nil {
		return paDevice{}, err
	}
	for _, pd := range devs {
		if pd.index == d.Index {
			return pd, nil
		}
	}
	return paDevice{}, fmt.Errorf("find device %q: index %d vanished", spec, d.Index)
}
