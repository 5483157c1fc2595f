package audio

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// narrowTestConfig is an ALSA configuration on top of the system's: a kiosk's speaker made of a
// plugin of its own (upmix, from the ALSA plugins package) over a null sink, an unrelated
// plugin device that nothing in it uses, and a built-in device (null, as hw or dmix are) that
// loads no library. (With no sound card here the system's own devices, default included, do
// not open and are not listed.) The kiosk's microphone reaches its plugin (speex) through
// @func refer, by path.
const narrowTestConfig = `</usr/share/alsa/alsa.conf>
pcm.kiosk_speaker { type plug slave.pcm "kiosk_upmix" }
pcm.kiosk_upmix { type upmix slave.pcm "kiosk_sink" channels 4 }
pcm.kiosk_sink { type null }
pcm.unrelated_upmix { type upmix slave.pcm "kiosk_sink" channels 4 }
pcm.spare_sink { type null }
pcm.kiosk_mic { type asym capture.pcm { @func refer name "pcm.kiosk_denoise" } }
pcm.kiosk_denoise { type speex slave.pcm "kiosk_sink" denoise true }
`

// useALSAConfig points ALSA at config (on top of the system's) for the test, with PortAudio
// not initialised, and forgets what the test declared when it ends.
func useALSAConfig(t *testing.T, config string) {
	t.Helper()
	if _, err := os.Stat("/usr/share/alsa/alsa.conf"); err != nil {
		t.Fatalf("ALSA's configuration: %v", err)
	}
	if mods, _ := filepath.Glob("/usr/lib/*/alsa-lib/libasound_module_pcm_upmix.so"); len(mods) == 0 {
		t.Fatal("the ALSA plugins package (libasound2-plugins) is not installed: its upmix plugin is the test's plugin device")
	}
	// An earlier test's stream close may still be under way (a dead device's can take seconds);
	// PortAudio terminates when it ends.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pa.mu.Lock()
		refs, inited, closing := pa.refs, pa.inited, pa.closing
		pa.mu.Unlock()
		if refs == 0 && !inited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PortAudio is in use: %d holders, initialised %v, %d closes under way", refs, inited, closing)
		}
	}
	path := filepath.Join(t.TempDir(), "asound.conf")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ALSA_CONFIG_PATH", path)
	t.Cleanup(func() {
		pa.mu.Lock()
		pa.declared = nil
		pa.mu.Unlock()
	})
}

// listNames holds PortAudio with devices declared, and returns the names it lists and
// whether the list was narrowed.
func listNames(t *testing.T, devices ...string) ([]string, bool) {
	t.Helper()
	release, err := Hold(devices...)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	devs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
	}
	return names, narrowed()
}

// narrowed reports whether PortAudio's current initialisation left plugin devices out.
func narrowed() bool {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	return pa.narrowed
}

// TestHoldNarrowsTheProbe: with the devices a service opens declared, PortAudio's probe leaves
// out the plugin devices none of them names, keeps what the named ones are built on, and
// selects the same device for each of them.
func TestHoldNarrowsTheProbe(t *testing.T) {
	useALSAConfig(t, narrowTestConfig)

	every, narrowed := listNames(t)
	if narrowed {
		t.Error("nothing declared: the list was narrowed")
	}
	for _, want := range []string{"kiosk_speaker", "kiosk_upmix", "unrelated_upmix", "kiosk_sink", "spare_sink", "kiosk_mic", "kiosk_denoise"} {
		if !slices.Contains(every, want) {
			t.Fatalf("every device probed: %q is not listed: %q", want, every)
		}
	}

	some, narrowed := listNames(t, "Kiosk_Speaker", "none-such-fallback", "kiosk_mic")
	if !narrowed {
		t.Error("devices declared: the list was not narrowed")
	}
	for _, want := range []string{"kiosk_speaker", "kiosk_upmix", "kiosk_sink", "spare_sink", "kiosk_mic"} {
		if !slices.Contains(some, want) {
			t.Errorf("narrowed to kiosk_speaker: %q is missing (what it is built on and built-in devices stay): %q", want, some)
		}
	}
	if slices.Contains(some, "unrelated_upmix") {
		t.Errorf("narrowed to kiosk_speaker: unrelated_upmix was probed: %q", some)
	}
	for _, n := range some {
		if !slices.Contains(every, n) {
			t.Errorf("narrowed list has %q, which the whole list has not", n)
		}
	}
	for _, spec := range []string{"kiosk_speaker", "KIOSK", "sink"} {
		whole, err1 := Select(devInfos(every), spec, false)
		part, err2 := Select(devInfos(some), spec, false)
		if err1 != nil || err2 != nil || whole.Name != part.Name {
			t.Errorf("Select %q: %q (%v) from every device, %q (%v) from the narrowed list", spec, whole.Name, err1, part.Name, err2)
		}
	}

	// A device chosen by its index counts every device: nothing is left out, though the
	// narrowed probe before it kept its configuration in memory for the opens that follow.
	again, narrowed := listNames(t, "kiosk_speaker", "3")
	if narrowed {
		t.Error("a device chosen by index: the list was narrowed")
	}
	if !slices.Contains(again, "unrelated_upmix") {
		t.Errorf("probing everything after a narrowed probe: unrelated_upmix is missing: %q", again)
	}
}

// devInfos is a list of output devices by name, in order, for Select.
func devInfos(names []string) []DeviceInfo {
	devs := make([]DeviceInfo, len(names))
	for i, n := range names {
		devs[i] = DeviceInfo{Index: i, Name: n, MaxOutputChannels: 2}
	}
	return devs
}

// TestUndeclaredDeviceProbesEverything: a device string that names a plugin device left out of
// the narrowed probe finds it when its opener is PortAudio's only user, and says why not when
// other devices are open.
func TestUndeclaredDeviceProbesEverything(t *testing.T) {
	useALSAConfig(t, narrowTestConfig)
	release, err := Hold("kiosk_speaker")
	if err != nil {
		t.Fatal(err)
	}
	other, err := Hold()
	if err != nil {
		release()
		t.Fatal(err)
	}
	err = paDo(func() error { _, err := findDevice("unrelated_upmix", false); return err })
	if err == nil || !strings.Contains(err.Error(), "not probed while other devices are open") {
		t.Errorf("two holders, an undeclared plugin device: %v, want an error that says why", err)
	}
	other()
	var found paDevice
	err = paDo(func() error { var err error; found, err = findDevice("unrelated_upmix", false); return err })
	if err != nil || found.name != "unrelated_upmix" {
		t.Errorf("sole holder, an undeclared plugin device: %q, %v; want it found after probing everything", found.name, err)
	}
	if narrowed() {
		t.Error("after probing everything the list is still narrowed")
	}
	release()
}

// TestDeclaredDeviceMissingProbesNarrowly: a declared device that is missing (unplugged while
// its opener recovers) is an error without probing everything; an index, which counts every
// device, probes everything first.
func TestDeclaredDeviceMissingProbesNarrowly(t *testing.T) {
	useALSAConfig(t, narrowTestConfig)
	release, err := Hold("kiosk_speaker", "unplugged_usb_speaker")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, before := paCounts()
	err = paDo(func() error { _, err := findDevice("unplugged_usb_speaker", false); return err })
	if _, after := paCounts(); err == nil || after != before || !narrowed() {
		t.Errorf("a declared device missing: %v, %d initialisations (want none), narrowed %v (want true)", err, after-before, narrowed())
	}
	if err != nil && strings.Contains(err.Error(), NotProbed) {
		t.Errorf("a declared device missing: %v; the probe is not why", err)
	}
	if LeftOut("kiosk_speaker") || LeftOut("default") || !LeftOut("unrelated_upmix") || !LeftOut("0") {
		t.Errorf("LeftOut: declared %v, default %v, undeclared %v, an index %v; want false, false, true, true",
			LeftOut("kiosk_speaker"), LeftOut("default"), LeftOut("unrelated_upmix"), LeftOut("0"))
	}
	var every []string
	err = paDo(func() error {
		if _, err := findDevice("0", false); err != nil {
			return err
		}
		devs, _, _, err := paDevices()
		for _, d := range devs {
			every = append(every, d.name)
		}
		return err
	})
	if err != nil || narrowed() || !slices.Contains(every, "unrelated_upmix") {
		t.Errorf("an index, sole holder: %v, narrowed %v, devices %q; want every device probed first", err, narrowed(), every)
	}
}
