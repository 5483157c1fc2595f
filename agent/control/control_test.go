package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/realtime"
)

// newServer serves an on_demand agent (it dials nothing until told to) on a socket in a temp dir.
func newServer(t *testing.T) (string, *agent.Supervisor) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	srv, sup := listen(t, path, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	go sup.Run(ctx)
	t.Cleanup(func() { cancel(); <-done })
	return path, sup
}

// listen makes an on_demand agent and a control socket for it at path.
func listen(t *testing.T, path string, log *slog.Logger) (*Server, *agent.Supervisor) {
	t.Helper()
	spk := devices.NewFileSpeaker("", 24000)
	t.Cleanup(func() { spk.Close() })
	sup, err := agent.New(agent.Options{
		Config: agent.Config{Policy: agent.PolicyOnDemand},
		Server: realtime.Config{URL: "ws://127.0.0.1:1/v1/realtime", Mode: realtime.ModeAudio},
		Audio:  devices.NewPacedSource(make([]float32, 16000), 16000, true, 1), Speaker: spk,
		Dial: func(context.Context, realtime.Config) (realtime.Session, error) {
			return nil, errors.New("no server in this test")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(path, sup, log)
	if err != nil {
		t.Fatal(err)
	}
	return srv, sup
}

func TestCommands(t *testing.T) {
	path, _ := newServer(t)
	ctx := context.Background()
	resp, err := Call(ctx, path, Request{Cmd: "status"})
	if err != nil || !resp.OK || resp.Status.State != agent.StateIdle || resp.Status.Policy != agent.PolicyOnDemand {
		t.Fatalf("status: %v %+v", err, resp)
	}
	resp, err = Call(ctx, path, Request{Cmd: "mute", Arg: "on"})
	if err != nil || !resp.OK || !resp.Status.Muted {
		t.Fatalf("mute: %v %+v", err, resp)
	}
	// A speaker without a volume control (a file, none) still shows the volume set.
	resp, err = Call(ctx, path, Request{Cmd: "volume", Arg: "37"})
	if err != nil || !resp.OK || resp.Status.Volume != 37 || resp.Status.PlaybackUnderruns != nil {
		t.Fatalf("volume 37 without a volume control: %v %+v", err, resp)
	}
	if b, _ := json.Marshal(resp.Status); strings.Contains(string(b), ":-1") {
		t.Fatalf("status JSON holds a -1 sentinel: %s", b)
	}
	resp, err = Call(ctx, path, Request{Cmd: "settings", Arg: "reset"})
	if err != nil || !resp.OK || resp.Status.Muted || resp.Status.Volume != 100 || len(resp.Status.Overrides) != 0 {
		t.Fatalf("settings reset: %v %+v", err, resp)
	}
	for _, tt := range []struct {
		req  Request
		want string
	}{
		{Request{Cmd: "dance"}, `unknown command "dance"`},
		{Request{}, "no cmd"},
		{Request{Cmd: "mute", Arg: "loud"}, `"loud" is not on or off`},
		{Request{Cmd: "say"}, "say: no text"},
		{Request{Cmd: "volume", Arg: "loud"}, "not a number"},
		{Request{Cmd: "volume", Arg: "150"}, "outside 0..100"},
		{Request{Cmd: "settings", Arg: "forget"}, `"forget" is not reset`},
		{Request{Cmd: "say", Text: "hi", MaxNewTokens: -1}, "max_new_tokens -1"},
		{Request{Cmd: "ask", Text: "what?", Snapshot: true}, "no camera"},
	} {
		resp, err := Call(ctx, path, tt.req)
		if err != nil || resp.OK || !strings.Contains(resp.Error, tt.want) {
			t.Errorf("%+v: %v %+v, want error %q", tt.req, err, resp, tt.want)
		}
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, %v", info.Mode().Perm(), err)
	}
}

// Bad bytes on the socket get an error line, and the server keeps serving.
func TestBadRequests(t *testing.T) {
	path, _ := newServer(t)
	for _, raw := range []string{"{not json\n", strings.Repeat("x", maxRequest+10) + "\n", "\n", `{"cmd":5}` + "\n"} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte(raw))
		buf := make([]byte, 4096)
		n, _ := c.Read(buf)
		c.Close()
		if !strings.Contains(string(buf[:n]), `"ok":false`) {
			t.Errorf("%.20q: answer %q", raw, buf[:n])
		}
	}
	if resp, err := Call(context.Background(), path, Request{Cmd: "status"}); err != nil || !resp.OK {
		t.Fatalf("server stopped serving: %v", err)
	}
}

func TestSocketInUse(t *testing.T) {
	path, sup := newServer(t)
	if _, err := Listen(path, sup, nil); err == nil || !strings.Contains(err.Error(), "already listening") {
		t.Fatalf("second listener: %v", err)
	}
	if _, err := Call(context.Background(), filepath.Join(t.TempDir(), "none.sock"), Request{Cmd: "status"}); err == nil || !strings.Contains(err.Error(), "is omnisat running") {
		t.Fatalf("missing socket: %v", err)
	}
}

// FuzzRequest feeds arbitrary bytes to the request reader and decoder: an error or a request,
// never a panic, and never a line longer than the limit.
func FuzzRequest(f *testing.F) {
	f.Add([]byte(`{"cmd":"status"}` + "\n"))
	f.Add([]byte(`{"cmd":"ask","text":"x","snapshot":true}` + "\n"))
	f.Add([]byte("{\"cmd\":\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		line, err := readLine(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		if len(line) > maxRequest {
			t.Fatalf("line of %d bytes accepted", len(line))
		}
		var req Request
		_ = json.Unmarshal(line, &req)
	})
}

// A reload replaces the agent behind the socket: between two agents requests are told to try
// again, and then they reach the new one.
func TestAgentReplaced(t *testing.T) {
	dir := t.TempDir()
	srv, first := listen(t, filepath.Join(dir, "control.sock"), nil)
	_, second := listen(t, filepath.Join(dir, "other.sock"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	first.Mute(true)
	path := filepath.Join(dir, "control.sock")
	if resp, err := Call(ctx, path, Request{Cmd: "status"}); err != nil || !resp.Status.Muted {
		t.Fatalf("first agent: %v %+v", err, resp)
	}
	srv.SetAgent(nil)
	if resp, err := Call(ctx, path, Request{Cmd: "status"}); err != nil || resp.OK || !strings.Contains(resp.Error, "restarting") {
		t.Fatalf("between agents: %v %+v", err, resp)
	}
	srv.SetAgent(second)
	if resp, err := Call(ctx, path, Request{Cmd: "status"}); err != nil || !resp.OK || resp.Status.Muted {
		t.Fatalf("second agent: %v %+v", err, resp)
	}
}
