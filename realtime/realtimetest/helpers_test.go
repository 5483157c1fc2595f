package realtimetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

const ioTimeout = 5 * time.Second

func newSrv(t testing.TB, opts Options) *Server {
	t.Helper()
	s := NewServer(opts)
	t.Cleanup(s.Close)
	return s
}

// client is a raw gorilla/websocket test client.
type client struct {
	t  testing.TB
	ws *websocket.Conn
}

// msg is one server message: JSON decoded (text) or raw bytes (binary).
type msg struct {
	Binary bool
	Raw    []byte
	M      map[string]any
}

func (m msg) typ() string {
	if m.Binary {
		return "binary"
	}
	s, _ := m.M["type"].(string)
	return s
}

func (m msg) str(k string) string { s, _ := m.M[k].(string); return s }

func (m msg) num(k string) float64 { f, _ := m.M[k].(float64); return f }

func (m msg) kv() int {
	if mt, ok := m.M["metrics"].(map[string]any); ok {
		f, _ := mt["kv_cache_length"].(float64)
		return int(f)
	}
	return int(m.num("kv_cache_length"))
}

func dial(t testing.TB, s *Server, query string) *client {
	t.Helper()
	u := s.URL()
	if query != "" {
		u += "?" + query
	}
	ws, resp, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	resp.Body.Close()
	ws.SetReadLimit(64 << 20)
	c := &client{t: t, ws: ws}
	t.Cleanup(func() { ws.Close() })
	return c
}

func (c *client) send(v any) {
	c.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		c.t.Fatalf("encode %v: %v", v, err)
	}
	c.sendText(data)
}

func (c *client) sendText(data []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, data); err != nil {
		c.t.Fatalf("send %.80s: %v", data, err)
	}
}

func (c *client) sendBinary(data []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, data); err != nil {
		c.t.Fatalf("send binary: %v", err)
	}
}

// read returns the next message, or the read error.
func (c *client) read() (msg, error) {
	_ = c.ws.SetReadDeadline(time.Now().Add(ioTimeout))
	mt, data, err := c.ws.ReadMessage()
	if err != nil {
		return msg{}, err
	}
	if mt == websocket.BinaryMessage {
		return msg{Binary: true, Raw: data}, nil
	}
	m := msg{Raw: data}
	if err := json.Unmarshal(data, &m.M); err != nil {
		m.M = nil
	}
	return m, nil
}

func (c *client) next() msg {
	c.t.Helper()
	m, err := c.read()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return m
}

// expect reads the next message and checks its type.
func (c *client) expect(typ string) msg {
	c.t.Helper()
	m := c.next()
	if m.typ() != typ {
		c.t.Fatalf("got %s %.200s, want %s", m.typ(), m.Raw, typ)
	}
	return m
}

// expectDelta reads a current-dialect delta of the given kind.
func (c *client) expectDelta(kind string) msg {
	c.t.Helper()
	m := c.expect("response.output.delta")
	if m.str("kind") != kind {
		c.t.Fatalf("got delta kind %q %.200s, want %q", m.str("kind"), m.Raw, kind)
	}
	return m
}

// closeCode reads until the connection ends and returns the close code received
// (websocket.CloseAbnormalClosure when the TCP connection ended without a close frame).
func (c *client) closeCode() (int, string) {
	c.t.Helper()
	for {
		_, err := c.read()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, ce.Text
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("connection still open after %v", ioTimeout)
		}
		return websocket.CloseAbnormalClosure, err.Error()
	}
}

// readUntilClose returns every message until the connection closes, and the close code.
func (c *client) readUntilClose() ([]msg, int) {
	c.t.Helper()
	var out []msg
	for {
		m, err := c.read()
		if err == nil {
			out = append(out, m)
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return out, ce.Code
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("connection still open after %v", ioTimeout)
		}
		return out, websocket.CloseAbnormalClosure
	}
}

// handshake waits for queue_done and initialises the session; it returns session.created.
func (c *client) handshake(d Dialect, mode string) msg {
	c.t.Helper()
	c.expect("session.queue_done")
	c.send(initMsgFor(d, mode, "You are a test."))
	return c.expect("session.created")
}

func initMsgFor(d Dialect, mode, instructions string) map[string]any {
	if d == Legacy {
		return map[string]any{"type": "session.update", "session": map[string]any{"instructions": instructions}}
	}
	if mode == "chat" {
		return map[string]any{"type": "session.init", "payload": map[string]any{}}
	}
	return map[string]any{"type": "session.init", "payload": map[string]any{"system_prompt": instructions}}
}

// appendFor builds a full-duplex append of the dialect.
func appendFor(d Dialect, audio []float32, frames []string, extra map[string]any) map[string]any {
	in := map[string]any{"audio": f32b64(audio)}
	if frames != nil {
		in["video_frames"] = frames
	}
	for k, v := range extra {
		in[k] = v
	}
	if d == Legacy {
		in["type"] = "input_audio_buffer.append"
		return in
	}
	return map[string]any{"type": "input.append", "input": in}
}

// stepMsgs reads the messages of one full-duplex step: current up to response.step.done
// (excluded, unknown extras dropped), legacy exactly one message.
func (c *client) stepMsgs(d Dialect) []msg {
	c.t.Helper()
	if d == Legacy {
		return []msg{c.next()}
	}
	var out []msg
	for {
		m := c.next()
		switch {
		case m.typ() == "response.step.done":
			return out
		case m.typ() == "response.output.delta" && m.str("kind") == "audio_tokens":
		default:
			out = append(out, m)
		}
	}
}

func tone(sec, amp float64) []float32 {
	n := int(sec * inputRate)
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(amp * math.Sin(2*math.Pi*440*float64(i)/inputRate))
	}
	return out
}

func silence(sec float64) []float32 { return make([]float32, int(sec*inputRate)) }

func f32b64(s []float32) string { return encodeFloat32(s) }

func decodeAudio(t testing.TB, b64 string) []float32 {
	t.Helper()
	s, err := decodeFloat32("audio", b64, 0)
	if err != nil {
		t.Fatalf("decode server audio: %v", err)
	}
	return s
}

func testImage(w, h int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), uint8(x + y), 255})
		}
	}
	return img
}

func jpegBytes(t testing.TB, w, h, q int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, testImage(w, h), &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func jpegB64(t testing.TB, w, h, q int) string {
	return base64.StdEncoding.EncodeToString(jpegBytes(t, w, h, q))
}

func pngB64(t testing.TB, w, h int) string {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, testImage(w, h)); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func pcm16(s []float32) []byte { return floatToPCM16(s) }

func waitEnded(t testing.TB, s *Server, idx int) SessionRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	r, err := s.WaitEnded(ctx, idx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func hasRejection(r SessionRecord, sub string) bool {
	for _, x := range r.Rejections {
		if strings.Contains(x, sub) {
			return true
		}
	}
	return false
}

func wavBytes(samples int) []byte {
	var b bytes.Buffer
	b.WriteString("RIFF")
	_ = binary.Write(&b, binary.LittleEndian, uint32(36+samples*2))
	b.WriteString("WAVEfmt ")
	b.Write(make([]byte, 20))
	b.WriteString("data")
	_ = binary.Write(&b, binary.LittleEndian, uint32(samples*2))
	b.Write(make([]byte, samples*2))
	return b.Bytes()
}
