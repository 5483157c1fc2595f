package realtime

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzSessionFrames plays arbitrary sequences of server frames (text, binary, closes with any code,
// before and after session.created) to a real session over an in-memory WebSocket, and checks
// that no input from a server can put the session in a state it does not leave by itself: no
// panic; Dial fails with a *Error of class retryable or config, or the session goes on and ends
// on its own (deadlines, dead link) with a *Error of a known class; and class config only with
// positive evidence (the other dialect's events, unknown_event, close 1003/1008/1009, an auth
// refusal, OpenVoice's recoverable:false with a configuration code).
//
// Input: byte 0 picks the dialect (bits 0-1), chat mode (0x08), whether the client sends a chunk
// (0x10) and closes (0x20), and whether the server stays silent after its script (0x40) instead
// of cutting the link; then frames of [op, n, n bytes]:
// op%6 = 0 text, 1 binary, 2 close (2-byte code + reason), 3 wait for the client's next message
// (at most 10 ms), 4 text of the payload repeated payload[0] times, 5 a ping.
func FuzzSessionFrames(f *testing.F) {
	for _, seed := range fuzzSessionSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > 4096 {
			return
		}
		runScript(t, data[0], parseScript(data[1:]))
	})
}

type scriptFrame struct {
	op      byte // 0 text, 1 binary, 2 close, 3 wait, 5 ping (4 is expanded to text)
	payload []byte
}

func parseScript(data []byte) []scriptFrame {
	var out []scriptFrame
	for len(data) >= 2 {
		op, n := data[0]%6, int(data[1])
		data = data[2:]
		n = min(n, len(data))
		p := data[:n]
		data = data[n:]
		if op == 4 {
			if len(p) == 0 {
				continue
			}
			p, op = []byte(strings.Repeat(string(p[1:]), int(p[0]))), 0
		}
		out = append(out, scriptFrame{op: op, payload: p})
	}
	return out
}

// What the first byte says: the dialect (and the mode), whether the client sends a chunk once
// set up, whether it closes, and whether the server cuts the link after its script.
func scriptConfig(b byte) (cfg Config, sendChunk, closeAfter, cut bool) {
	cfg = Config{URL: "ws://127.0.0.1:1/v1/realtime", Model: "m", Mode: ModeAudio,
		DialTimeout: time.Second, InitTimeout: 20 * time.Millisecond, CloseTimeout: 10 * time.Millisecond,
		PingInterval: 10 * time.Millisecond, DeadLinkTimeout: 30 * time.Millisecond, WriteTimeout: 30 * time.Millisecond,
		MaxFrameBytes: 64 << 10, EventBuffer: 4}
	switch b & 0x03 {
	case 1:
		cfg.Dialect = DialectLegacy
	case 2:
		cfg.Dialect = DialectOpenVoice
	default:
		cfg.Dialect = DialectCurrent
	}
	if b&0x08 != 0 && cfg.Dialect == DialectCurrent {
		cfg.Mode = ModeChat
	}
	return cfg, b&0x10 != 0, b&0x20 != 0, b&0x40 == 0
}

func runScript(t *testing.T, first byte, frames []scriptFrame) {
	cfg, sendChunk, closeAfter, cut := scriptConfig(first)
	client, server := net.Pipe()
	cfg.netDial = func(context.Context, string, string) (net.Conn, error) { return client, nil }
	var played sync.WaitGroup
	played.Add(1)
	go func() {
		defer played.Done()
		playScript(server, frames, cut)
	}()
	defer func() {
		client.Close()
		server.Close()
		played.Wait()
	}()

	// The queue has no deadline of its own: ctx bounds a script that never ends it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	s, err := Dial(ctx, cfg)
	cancel()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Dial: %T %v is not a *Error", err, err)
		}
		if e.Class != ClassRetryable && e.Class != ClassConfig {
			t.Fatalf("Dial failed with class %v: %v", e.Class, e)
		}
		checkEvidence(t, e, cfg.Dialect, frames)
		return
	}
	if sendChunk && cfg.Mode != ModeChat {
		sctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = s.Send(sctx, Chunk{ID: 7, Audio: make([]float32, MinChunkSamples)})
		cancel()
	}
	if closeAfter {
		go s.Close(context.Background(), "user_stop")
	}
	hang := time.NewTimer(10 * time.Second)
	defer hang.Stop()
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatal("events closed without a Closed event")
			}
			c, isClosed := ev.(Closed)
			if !isClosed {
				continue
			}
			for _, id := range c.Undelivered {
				if id != 7 {
					t.Fatalf("undelivered id %d was never sent", id)
				}
			}
			if c.Err == nil {
				if !closeAfter {
					t.Fatal("the session ended cleanly without Close")
				}
				return
			}
			switch c.Err.Class {
			case ClassRetryable, ClassConfig, ClassEnded:
			default:
				t.Fatalf("session ended with class %v: %v", c.Err.Class, c.Err)
			}
			checkEvidence(t, c.Err, cfg.Dialect, frames)
			return
		case <-hang.C:
			t.Fatal("the session neither went on to an end nor ended: stuck")
		}
	}
}

// checkEvidence fails a configuration error that the script gave no grounds for.
func checkEvidence(t *testing.T, e *Error, d Dialect, frames []scriptFrame) {
	t.Helper()
	if e.Class != ClassConfig || hasConfigEvidence(d, frames) {
		return
	}
	t.Fatalf("class config without positive evidence: %v", e)
}

func hasConfigEvidence(d Dialect, frames []scriptFrame) bool {
	other := map[Dialect][]string{
		DialectCurrent: {"response.output_audio.delta", "response.listen"},
		DialectLegacy:  {"response.output.delta", "response.done"},
	}[d]
	configCodes := []string{"unknown_event", "unauthorized", "forbidden", "auth_failed", "invalid_api_key",
		"chat_disabled", "invalid_mode", "model_not_found", "invalid_request"}
	for _, f := range frames {
		switch f.op {
		case 2:
			if len(f.payload) >= 2 {
				switch binary.BigEndian.Uint16(f.payload) {
				case 1003, 1008, 1009:
					return true
				}
			}
		case 0:
			var m struct {
				Type  string `json:"type"`
				Code  string `json:"code"`
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal(f.payload, &m) != nil {
				continue
			}
			for _, o := range other {
				if m.Type == o {
					return true
				}
			}
			code := m.Code
			if m.Error != nil {
				code = m.Error.Code
			}
			for _, c := range configCodes {
				if m.Type == "error" && code == c {
					return true
				}
			}
		}
	}
	return false
}

// playScript is the server: it answers the WebSocket handshake, plays the frames, then either
// cuts the link or stays silent (but reading) until the client leaves.
func playScript(conn net.Conn, frames []scriptFrame, cut bool) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Accept: "+base64.StdEncoding.EncodeToString(sum[:])+"\r\n\r\n"); err != nil {
		return
	}
	// The client's messages are read all along (a real server's read loop), so its writes
	// never block; a wait takes the next one.
	fromClient := make(chan struct{}, 64)
	go func() {
		defer close(fromClient)
		for {
			op, err := readClientFrame(br)
			if err != nil {
				return
			}
			if op == 1 || op == 2 {
				select {
				case fromClient <- struct{}{}:
				default:
				}
			}
		}
	}()
	for _, f := range frames {
		var err error
		switch f.op {
		case 0:
			err = writeServerFrame(conn, 1, f.payload)
		case 1:
			err = writeServerFrame(conn, 2, f.payload)
		case 2:
			err = writeServerFrame(conn, 8, f.payload[:min(len(f.payload), 125)])
		case 3:
			select {
			case _, ok := <-fromClient:
				if !ok {
					return
				}
			case <-time.After(10 * time.Millisecond):
			}
		case 5:
			err = writeServerFrame(conn, 9, f.payload[:min(len(f.payload), 125)])
		}
		if err != nil {
			return
		}
	}
	if cut {
		return
	}
	for range fromClient { // silent until the client leaves
	}
}

// writeServerFrame writes one unmasked WebSocket frame with FIN set.
func writeServerFrame(w io.Writer, opcode byte, payload []byte) error {
	head := []byte{0x80 | opcode, 0}
	switch n := len(payload); {
	case n < 126:
		head[1] = byte(n)
	case n < 1<<16:
		head[1] = 126
		head = binary.BigEndian.AppendUint16(head, uint16(n))
	default:
		head[1] = 127
		head = binary.BigEndian.AppendUint64(head, uint64(n))
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// readClientFrame reads one masked client frame and returns its opcode.
func readClientFrame(r *bufio.Reader) (byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if h[1]&0x80 != 0 {
		n += 4 // the mask
	}
	if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
		return 0, err
	}
	return h[0] & 0x0f, nil
}

// fuzzSessionSeeds are the real servers' sequences, good and bad.
func fuzzSessionSeeds() [][]byte {
	text := func(s string) []byte { return append([]byte{0, byte(len(s))}, s...) }
	closeFrame := func(code uint16) []byte { return []byte{2, 2, byte(code >> 8), byte(code)} }
	wait := []byte{3, 0}
	script := func(first byte, parts ...[]byte) []byte {
		out := []byte{first}
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	const current, legacy, openvoice, silent, sendChunk, closeIt = 0, 1, 2, 0x40, 0x10, 0x20
	queueDone := text(`{"type":"session.queue_done"}`)
	created := text(`{"type":"session.created","session_id":"sess_1","mode":"full_duplex","metrics":{}}`)
	return [][]byte{
		script(current|sendChunk|closeIt|silent, queueDone, wait, created, wait, text(`{"type":"response.output.delta","kind":"listen"}`), wait,
			text(`{"type":"session.closed","reason":"user_stop"}`)),
		script(current, text(`{"type":"session.queued","position":1,"ticket_id":"q_1","queue_length":1}`), queueDone, wait,
			text(`{"type":"session.closed","session_id":null,"reason":"backend_error"}`), closeFrame(1000)),
		script(current, queueDone, wait, created, text(`{"type":"session.closed","reason":"timeout"}`)),
		script(current|silent, queueDone, wait),          // a gateway that never answers the init
		script(current|silent, queueDone, wait, created), // then a dead link
		script(current, queueDone, wait, text(`{"type":"response.listen","kv_cache_length":3}`)),
		script(current, queueDone, wait, text(`{"type":"error","error":{"code":"unknown_event","message":"x"}}`)),
		script(legacy, queueDone, wait, closeFrame(1003)),
		script(current, text(`{"type":"error","error":{"code":"worker_busy","message":"No worker available"}}`), closeFrame(1013)),
		script(current|sendChunk|silent, queueDone, wait, created, []byte{1, 3, 1, 2, 3}, text(`{"type":"response.output.delta","kind":"audio","audio":"!!"}`)),
		script(legacy|sendChunk|silent, queueDone, wait, text(`{"type":"session.created","session_id":"rt_1"}`), wait,
			text(`{"type":"session.closed","reason":"context_full"}`)),
		script(openvoice, text(`{"type":"error","code":"model_not_found","message":"Model 'm' not found","recoverable":false}`), closeFrame(1008)),
		script(openvoice|sendChunk|closeIt|silent, text(`{"type":"session.created","session_id":"s"}`), wait,
			text(`{"type":"session.closed","reason":"client_request"}`)),
		script(openvoice, text(`{"type":"session.created","session_id":"s"}`), []byte{4, 3, 200, 'a', 'b'}),
		script(current|0x08|silent, queueDone, wait, created, wait, text(`{"type":"error","error":{"code":"inference_failed","message":"x"}}`)),
	}
}
