package satellite_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/internal/syncbuf"
	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/mqtt"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
	"github.com/omnisat/omnisat/satellite"
)

const speech = "../configs/demo/hello.wav"

// rig builds satellite configurations of real parts: a WAV file as the microphone, a speaker
// that plays into nothing, the simulator as the server, a control socket in a temporary
// folder. It counts how often the audio part is opened (tried, and done) and closed.
type rig struct {
	t      *testing.T
	sim    *realtimetest.Server
	dir    string
	logs   syncbuf.Buffer
	tries  atomic.Int32 // opens tried
	opens  atomic.Int32 // opens that worked
	closes atomic.Int32
}

func newRig(t *testing.T) *rig {
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 2})
	t.Cleanup(sim.Close)
	return &rig{t: t, sim: sim, dir: t.TempDir()}
}

// audio is an audio part opened from key: a WAV microphone (wav is its path) and a silent
// speaker. lock, when set, is held exclusively while the part is open, as an ALSA hw device is
// by the process that opened it: a second open fails until the first is closed.
func (r *rig) audio(key, wav, lock string) satellite.Part[satellite.Audio] {
	p := satellite.Part[satellite.Audio]{Key: key, Reports: []string{"microphone", "speaker"}}
	if lock != "" {
		p.Holds = []string{"audio:" + lock}
	}
	p.Open = func(ctx context.Context) (satellite.Opened[satellite.Audio], error) {
		r.tries.Add(1)
		var held *os.File
		if lock != "" {
			f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				return satellite.Opened[satellite.Audio]{}, err
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				f.Close()
				return satellite.Opened[satellite.Audio]{}, fmt.Errorf("open %s: device busy: %w", lock, err)
			}
			held = f
		}
		mic, err := devices.OpenWAVSource(wav, realtime.InputSampleRate, true, 1)
		if err != nil {
			if held != nil {
				held.Close()
			}
			return satellite.Opened[satellite.Audio]{}, err
		}
		spk := devices.NewFileSpeaker("", realtime.OutputSampleRate)
		r.opens.Add(1)
		return satellite.Opened[satellite.Audio]{Device: satellite.Audio{Microphone: mic, Speaker: spk}, Describe: "microphone " + wav,
			Close: func() error {
				r.closes.Add(1)
				if held != nil {
					held.Close()
				}
				return spk.Close()
			}}, nil
	}
	return p
}

func (r *rig) config(audio satellite.Part[satellite.Audio], edit func(*satellite.Config)) satellite.Config {
	c := satellite.Config{
		Audio: audio,
		Camera: satellite.Part[agent.FrameSource]{Key: "none", Open: func(context.Context) (satellite.Opened[agent.FrameSource], error) {
			return satellite.Opened[agent.FrameSource]{}, nil
		}},
		Agent: agent.Options{Config: agent.Config{Chunk: 250 * time.Millisecond},
			Server:       realtime.Config{URL: r.sim.URL(), Mode: realtime.ModeAudio, Init: realtime.Init{Instructions: "Be brief."}},
			SettingsFile: filepath.Join(r.dir, "settings.json")},
		ControlSocket: filepath.Join(r.dir, "control.sock"),
		Log:           slog.New(slog.NewTextHandler(&r.logs, nil)),
	}
	if edit != nil {
		edit(&c)
	}
	return c
}

func (r *rig) start(c satellite.Config) *satellite.System {
	r.t.Helper()
	sys, err := satellite.Start(context.Background(), c)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		sys.Stop()
		if r.t.Failed() {
			r.t.Logf("log:\n%s", r.logs.String())
		}
	})
	return sys
}

// listening waits for sys's agent to hold a session and returns its id.
func listening(t *testing.T, sys *satellite.System) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // generous: the machine may be busy
	for time.Now().Before(deadline) {
		if st := sys.Agent().Status(); st.State == agent.StateListening && st.SessionID != "" {
			return st.SessionID
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no session; status %+v", sys.Agent().Status())
	return ""
}

func status(t *testing.T, sock string) *control.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := control.Call(ctx, sock, control.Request{Cmd: "status"})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Parts whose configuration did not change are handed over, not opened again: a session
// setting restarts the agent on the same devices, a live setting keeps even the agent and its
// session, a changed audio part is opened anew and the old one closed.
func TestReloadHandsOverUnchangedParts(t *testing.T) {
	r := newRig(t)
	sys := r.start(r.config(r.audio("a", speech, ""), nil))
	reload := func(audioKey string, edit func(*satellite.Config)) {
		t.Helper()
		running, err := sys.Reload(context.Background(), r.config(r.audio(audioKey, speech, ""), edit))
		if err != nil {
			t.Fatal(err)
		}
		sys = running
	}
	first := listening(t, sys)
	agentBefore := sys.Agent()

	// A live change: the same agent, the same session.
	reload("a", func(c *satellite.Config) {
		v := 40
		c.Agent.Volume = &v
	})
	if sys.Agent() != agentBefore || listening(t, sys) != first || sys.Agent().Status().Volume != 40 {
		t.Fatalf("volume reload: session %s (was %s), volume %d", listening(t, sys), first, sys.Agent().Status().Volume)
	}

	// A session setting: a new agent and session on the devices handed over. What commands set
	// carries over (the new agent reads the settings file after the old one's last write).
	sys.Agent().Mute(true)
	halfSecond := func(c *satellite.Config) { c.Agent.Config.Chunk = 500 * time.Millisecond }
	reload("a", halfSecond)
	second := listening(t, sys)
	if second == first || r.opens.Load() != 1 || r.closes.Load() != 0 || !sys.Agent().Status().Muted {
		t.Fatalf("session %s (was %s); audio opened %d times, closed %d; muted %v", second, first, r.opens.Load(), r.closes.Load(),
			sys.Agent().Status().Muted)
	}
	if resp := status(t, filepath.Join(r.dir, "control.sock")); !resp.OK || resp.Status.SessionID != second {
		t.Fatalf("the control socket drives %+v, want session %s", resp, second)
	}

	// A token read from its file again (the file's text is the same): a new session with it.
	rotated := func(c *satellite.Config) { halfSecond(c); c.Agent.Server.Token = "rotated" }
	reload("a", rotated)
	third := listening(t, sys)
	if third == second || r.opens.Load() != 1 {
		t.Fatalf("after a new token: session %s (was %s), audio opened %d times", third, second, r.opens.Load())
	}

	// A changed audio part: opened beside the running one, which is closed after the swap.
	reload("b", rotated)
	if fourth := listening(t, sys); fourth == third || r.opens.Load() != 2 || r.closes.Load() != 1 {
		t.Fatalf("session %s (was %s); audio opened %d times, closed %d", fourth, third, r.opens.Load(), r.closes.Load())
	}
	if n := len(r.sim.Sessions()); n != 4 {
		t.Fatalf("%d sessions on the server, want 4", n)
	}
}

// A reload whose new configuration cannot be opened completely leaves the running system as it
// was: the same agent and session, the same devices, and whatever the reload had opened closed
// again.
func TestReloadRefusedKeepsRunning(t *testing.T) {
	r := newRig(t)
	broker := testbroker.Start(t)
	withMQTT := func(c *satellite.Config) {
		c.MQTT = satellite.MQTT{Config: mqtt.Config{Broker: broker.URL()}.Resolve("kiosk", r.dir), DeviceID: "kiosk", Version: "test"}
	}
	sys := r.start(r.config(r.audio("a", speech, ""), withMQTT))
	first := listening(t, sys)
	busy := filepath.Join(r.dir, "busy.sock")
	other, err := net.Listen("unix", busy) // another program serves this socket
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tt := range []struct {
		name string
		cfg  satellite.Config
		want string
	}{
		{"a microphone that cannot be opened", r.config(r.audio("b", filepath.Join(r.dir, "missing.wav"), ""), withMQTT), "missing.wav"},
		{"a control socket in use, with new devices and a new session", r.config(r.audio("b", speech, ""), func(c *satellite.Config) {
			withMQTT(c)
			c.Agent.Config.Chunk = 500 * time.Millisecond
			c.ControlSocket = busy
		}), "another omnisat is already listening there"},
		{"an MQTT certificate that is not there", r.config(r.audio("b", speech, ""), func(c *satellite.Config) {
			withMQTT(c)
			c.MQTT.Config.Broker = "ssl://127.0.0.1:1"
			c.MQTT.Config.TLS.CAFile = filepath.Join(r.dir, "missing-ca.pem")
		}), "mqtt.tls.ca_file"},
	} {
		opens, closes := r.opens.Load(), r.closes.Load()
		running, err := sys.Reload(context.Background(), tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) || running != sys {
			t.Fatalf("%s: %v (the same system: %v)", tt.name, err, running == sys)
		}
		if id := listening(t, sys); id != first || len(r.sim.Sessions()) != 1 {
			t.Fatalf("%s: session %s (was %s), %d sessions on the server", tt.name, id, first, len(r.sim.Sessions()))
		}
		if opened, closed := r.opens.Load()-opens, r.closes.Load()-closes; opened != closed {
			t.Fatalf("%s: the reload opened the audio part %d times and closed it %d times", tt.name, opened, closed)
		}
		if resp := status(t, filepath.Join(r.dir, "control.sock")); !resp.OK || resp.Status.SessionID != first {
			t.Fatalf("%s: control socket: %+v", tt.name, resp)
		}
	}
	if r.closes.Load() != r.opens.Load()-1 {
		t.Fatalf("the running audio part was closed: opened %d, closed %d", r.opens.Load(), r.closes.Load())
	}
}

// A device only one process can hold (an ALSA hw device) cannot be opened beside itself: the
// reload releases it first, and when the new configuration fails, the old one is opened again.
func TestReloadReleasesAHeldDevice(t *testing.T) {
	r := newRig(t)
	lock := filepath.Join(r.dir, "hw-1-0")
	sys := r.start(r.config(r.audio("gain 0", speech, lock), nil))
	first := listening(t, sys)

	running, err := sys.Reload(context.Background(), r.config(r.audio("gain 6", speech, lock), nil))
	if err != nil || running == nil {
		t.Fatalf("reload on the held device: %v", err)
	}
	sys = running
	second := listening(t, sys)
	// Tried at start, beside the running one (busy), and again after the release.
	if second == first || r.tries.Load() != 3 || r.opens.Load() != 2 || r.closes.Load() != 1 {
		t.Fatalf("session %s (was %s); audio tried %d times, opened %d, closed %d", second, first, r.tries.Load(), r.opens.Load(), r.closes.Load())
	}

	// The new configuration's microphone cannot be opened at all: the old one runs again.
	running, err = sys.Reload(context.Background(), r.config(r.audio("gain 12", filepath.Join(r.dir, "missing.wav"), lock), nil))
	if err == nil || !strings.Contains(err.Error(), "missing.wav") || running == nil {
		t.Fatalf("reload to a missing microphone on the held device: %v, running %v", err, running != nil)
	}
	sys = running
	if third := listening(t, sys); third == second {
		t.Fatalf("the old configuration did not start again: session %s", third)
	}
	if resp := status(t, filepath.Join(r.dir, "control.sock")); !resp.OK {
		t.Fatalf("control socket: %+v", resp)
	}
}

// A device's health carries over to the agent that takes it over: a lost microphone stays lost.
func TestReloadKeepsDeviceHealth(t *testing.T) {
	r := newRig(t)
	var report atomic.Pointer[agent.Supervisor]
	audio := r.audio("a", speech, "")
	open := audio.Open
	audio.Open = func(ctx context.Context) (satellite.Opened[satellite.Audio], error) {
		o, err := open(ctx)
		o.Attach = func(sup *agent.Supervisor) { report.Store(sup) }
		return o, err
	}
	sys := r.start(r.config(audio, nil))
	listening(t, sys)
	report.Load().DeviceState("microphone", false, errors.New("unplugged"))
	running, err := sys.Reload(context.Background(), r.config(audio, func(c *satellite.Config) { c.Agent.Config.Chunk = 500 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	sys = running
	listening(t, sys)
	if report.Load() != sys.Agent() || sys.Agent().Status().Devices["microphone"] != "unplugged" {
		t.Fatalf("devices after the reload: %v", sys.Agent().Status().Devices)
	}
}
