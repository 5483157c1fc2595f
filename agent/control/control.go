// Package control is the agent's local control socket: a unix socket that kiosk scripts, GPIO
// buttons, `omnisat ctl` and tests use to drive the agent without MQTT.
//
// The protocol is one JSON request line per connection and one JSON response line:
//
//	{"cmd":"status"}                         → {"ok":true,"status":{...}}
//	{"cmd":"mute","arg":"on"}                → {"ok":true,"status":{...}}
//	{"cmd":"say","text":"hello"}             → {"ok":true,"answer":{"id":"...","text":"hello"}}
//	{"cmd":"ask","text":"...","snapshot":true} → {"ok":true,"answer":{...}} (waits for the answer)
//	{"cmd":"say","text":"hi","voice":"anna","max_new_tokens":64,"thinking":false}
//	{"cmd":"settings","arg":"reset"}         → {"ok":true,"status":{...}}
//
// Commands: status, start, stop, restart, interrupt, mute on|off, camera on|off, volume N, say,
// ask, settings reset.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/agent"
)

// Request is one command.
type Request struct {
	Cmd      string `json:"cmd"`
	Arg      string `json:"arg,omitempty"`
	Text     string `json:"text,omitempty"`
	Snapshot bool   `json:"snapshot,omitempty"`
	// Chat options of say and ask (zero: the server's defaults; no voice: the configured one).
	MaxNewTokens int    `json:"max_new_tokens,omitempty"`
	Thinking     bool   `json:"thinking,omitempty"`
	Voice        string `json:"voice,omitempty"`
}

// Response is the answer to one command.
type Response struct {
	OK     bool          `json:"ok"`
	Error  string        `json:"error,omitempty"`
	Status *agent.Status `json:"status,omitempty"`
	Answer *agent.Answer `json:"answer,omitempty"`
}

// maxRequest bounds one request line.
const maxRequest = 64 << 10

// answerTimeout bounds how long ask and say wait for their answer.
const answerTimeout = 2 * time.Minute

// maxNewTokens bounds a request's max_new_tokens (MiniCPM-o's context is 8192 tokens).
const maxNewTokens = 8192

// Server serves one agent on a unix socket.
type Server struct {
	sup  atomic.Pointer[agent.Supervisor] // nil while the agent is being replaced
	ln   net.Listener
	path string
	log  *slog.Logger
	ids  atomic.Uint64
	wg   sync.WaitGroup
}

// ListenError is a control socket that could not be made.
type ListenError struct {
	Path string
	Err  error
}

func (e *ListenError) Error() string { return fmt.Sprintf("control socket %s: %v", e.Path, e.Err) }
func (e *ListenError) Unwrap() error { return e.Err }

// Listen creates the socket at path (its folder too), readable and writable by the owner and the
// group only. A stale socket left by a crash is replaced; one in use is an error. sup may be
// nil until SetAgent.
func Listen(path string, sup *agent.Supervisor, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, &ListenError{Path: path, Err: err}
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, &ListenError{Path: path, Err: errors.New("another omnisat is already listening there")}
		}
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, &ListenError{Path: path, Err: err}
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, &ListenError{Path: path, Err: err}
	}
	srv := &Server{ln: ln, path: path, log: log}
	srv.SetAgent(sup)
	return srv, nil
}

// Accept retries after a failure (out of file descriptors, EMFILE) wait from acceptRetryMin,
// doubling up to acceptRetryMax while the failures last.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

// Serve answers requests until ctx is done, then removes the socket. A failing Accept (the
// process out of file descriptors) does not end it: it tries again, backing off, and says so
// once.
func (s *Server) Serve(ctx context.Context) {
	go func() { <-ctx.Done(); s.ln.Close() }()
	var wait time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			if wait == 0 {
				s.log.Warn("control socket: cannot accept; retrying", "err", err)
			}
			wait = min(max(2*wait, acceptRetryMin), acceptRetryMax)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			continue
		}
		if wait > 0 {
			s.log.Info("control socket: accepting again")
			wait = 0
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, c)
		}()
	}
	s.wg.Wait()
	os.Remove(s.path)
}

func (s *Server) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReaderSize(c, 4096)
	line, err := readLine(r)
	var resp Response
	if err != nil {
		resp = Response{Error: err.Error()}
	} else {
		var req Request
		if err := json.Unmarshal(line, &req); err != nil {
			resp = Response{Error: fmt.Sprintf("request is not JSON: %v", err)}
		} else {
			resp = s.Do(ctx, req)
		}
	}
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	b, _ := json.Marshal(resp)
	c.Write(append(b, '\n'))
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, fmt.Errorf("read request: %w", err)
		}
		line = append(line, chunk...)
		if len(line) > maxRequest {
			return nil, fmt.Errorf("request over %d bytes", maxRequest)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

// Close releases a socket that was never served (Serve removes its own when it ends).
func (s *Server) Close() error {
	err := s.ln.Close()
	os.Remove(s.path)
	return err
}

// SetAgent makes sup the agent that requests drive from now on (a reload replaced it), or
// answers every request with "restarting" while sup is nil. Requests already running finish
// with the agent they began with.
func (s *Server) SetAgent(sup *agent.Supervisor) { s.sup.Store(sup) }

// Do runs one request (also used in-process by tests and the CLI).
func (s *Server) Do(ctx context.Context, req Request) Response {
	sup := s.sup.Load()
	if sup == nil {
		return Response{Error: "the agent is restarting (a configuration reload): try again in a moment"}
	}
	ok := func() Response { st := sup.Status(); return Response{OK: true, Status: &st} }
	switch req.Cmd {
	case "status":
		return ok()
	case "start":
		sup.Start()
	case "stop":
		sup.Stop()
	case "restart":
		sup.Restart()
	case "interrupt":
		sup.Interrupt()
	case "mute", "camera":
		on, err := parseOnOff(req.Arg)
		if err != nil {
			return Response{Error: fmt.Sprintf("%s: %v", req.Cmd, err)}
		}
		if req.Cmd == "mute" {
			sup.Mute(on)
		} else {
			sup.Camera(on)
		}
	case "volume":
		v, err := strconv.Atoi(req.Arg)
		if err != nil {
			return Response{Error: fmt.Sprintf("volume: %q is not a number 0..100", req.Arg)}
		}
		if err := sup.SetVolume(v); err != nil {
			return Response{Error: err.Error()}
		}
	case "settings":
		if req.Arg != "reset" {
			return Response{Error: fmt.Sprintf("settings: %q is not reset", req.Arg)}
		}
		sup.ResetSettings()
	case "say", "ask":
		if req.Text == "" {
			return Response{Error: req.Cmd + ": no text"}
		}
		if req.MaxNewTokens < 0 || req.MaxNewTokens > maxNewTokens {
			return Response{Error: fmt.Sprintf("%s: max_new_tokens %d is outside 1..%d", req.Cmd, req.MaxNewTokens, maxNewTokens)}
		}
		return s.await(ctx, sup, req)
	case "":
		return Response{Error: "no cmd in request"}
	default:
		return Response{Error: fmt.Sprintf("unknown command %q (want status, start, stop, restart, interrupt, mute, camera, volume, settings, say, ask)", req.Cmd)}
	}
	// Give the agent's loop a moment so the status shows the command's effect.
	time.Sleep(50 * time.Millisecond)
	return ok()
}

// await sends say/ask and waits for its Answer event.
func (s *Server) await(ctx context.Context, sup *agent.Supervisor, req Request) Response {
	id := "ctl-" + strconv.FormatUint(s.ids.Add(1), 10)
	events, cancel := sup.Subscribe(1024)
	defer cancel()
	o := agent.TurnOptions{Snapshot: req.Snapshot, MaxNewTokens: req.MaxNewTokens, Thinking: req.Thinking, Voice: req.Voice}
	if req.Cmd == "say" {
		sup.Say(id, req.Text, o)
	} else {
		sup.Ask(id, req.Text, o)
	}
	timeout := time.NewTimer(answerTimeout)
	defer timeout.Stop()
	for {
		select {
		case ev, open := <-events:
			if !open {
				return Response{Error: "agent stopped"}
			}
			if a, isAnswer := ev.(agent.Answer); isAnswer && a.ID == id {
				if a.Error != "" {
					return Response{Error: a.Error, Answer: &a}
				}
				return Response{OK: true, Answer: &a}
			}
		case <-timeout.C:
			return Response{Error: fmt.Sprintf("%s: no answer within %v", req.Cmd, answerTimeout)}
		case <-ctx.Done():
			return Response{Error: "agent stopping"}
		}
	}
}

func parseOnOff(s string) (bool, error) {
	switch s {
	case "on", "ON", "true", "1":
		return true, nil
	case "off", "OFF", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not on or off", s)
}

// Call sends one request to the socket at path and returns the response.
func Call(ctx context.Context, path string, req Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no control socket at %s: is omnisat running?", path)
		}
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	line, err := readLine(bufio.NewReader(c))
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("control socket %s: bad response: %w", path, err)
	}
	return &resp, nil
}
