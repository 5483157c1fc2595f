package realtime_test

import (
	"context"
	"io"
	"net"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// writeCounter is a TCP connection that records the size of every write call.
type writeCounter struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, len(p))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

// large counts the writes of more than size bytes.
func (w *writeCounter) large(size int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.writes {
		if l > size {
			n++
		}
	}
	return n
}

// A media chunk goes out as one WebSocket frame in one write call, not in 4 KiB pieces (21
// frames and 21 system calls for a second of audio with gorilla's default buffer), and the
// server takes it as the same message, sample for sample.
func TestMediaChunkOneWrite(t *testing.T) {
	for _, mode := range []realtime.Mode{realtime.ModeAudio, realtime.ModeVideo} {
		t.Run(string(mode), func(t *testing.T) {
			srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.Current})
			conn := &writeCounter{}
			cfg := fastConfig(srv.URL(), realtime.DialectCurrent, mode)
			cfg.PingInterval, cfg.DeadLinkTimeout = 30*time.Second, time.Minute
			cfg = realtime.WithNetDialForTest(cfg, func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				conn.Conn = c
				return conn, err
			})
			s := dial(t, cfg)
			var frames [][]byte
			if mode == realtime.ModeVideo {
				frames = [][]byte{testJPEG(t, 640, 480)}
			}
			var sent []float32
			const chunks = 3
			for range chunks {
				a := tone(realtime.InputSampleRate, 0.3)
				send(t, s, realtime.Chunk{Audio: a, Frames: frames})
				sent = append(sent, a...)
			}
			deadline := time.Now().Add(20 * time.Second)
			for len(srv.Sessions()[0].Audio) < len(sent) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if rec := srv.Sessions()[0]; !reflect.DeepEqual(rec.Audio, sent) {
				t.Fatalf("the server received %d samples, not the %d sent", len(rec.Audio), len(sent))
			}
			// Control messages (init, pongs) are far smaller than 4 KiB.
			if n := conn.large(4 << 10); n != chunks {
				t.Errorf("%d chunks went out in %d writes of more than 4 KiB, want one each", chunks, n)
			}
		})
	}
}

// Chunks sent in bursts (a chunk cut at a barge-in, the force_listen one right after it) are
// built in the buffers of messages already written, as single chunks are: a burst does not
// allocate a new ~85 KB message (it did, when the session kept one buffer and the writer still
// held it as the next chunk came).
func TestChunkBurstsReuseMessageBuffers(t *testing.T) {
	url := scriptServer(t, func(ws *websocket.Conn) {
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.queue_done"}`))
		for first := true; ; first = false {
			_, r, err := ws.NextReader()
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				return
			}
			if first { // the init
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"s"}`))
			}
		}
	})
	cfg := realtime.Config{URL: url, Mode: realtime.ModeAudio, PingInterval: 30 * time.Second, DeadLinkTimeout: time.Minute}
	s, err := realtime.Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background(), "user_stop")
	go func() {
		for range s.Events() {
		}
	}()
	whole, cut := tone(realtime.InputSampleRate, 0.3), tone(realtime.InputSampleRate/3, 0.3)
	sent := uint64(0)
	burst := func() {
		for _, a := range [][]float32{cut, whole, whole} {
			sent++
			send(t, s, realtime.Chunk{ID: sent, Audio: a})
		}
		for deadline := time.Now().Add(10 * time.Second); s.Stats().ChunksDelivered < sent; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d chunks delivered", s.Stats().ChunksDelivered, sent)
			}
		}
	}
	burst() // the first messages are new
	burst()
	const bursts = 30
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range bursts {
		burst()
	}
	runtime.ReadMemStats(&after)
	perBurst := (after.TotalAlloc - before.TotalAlloc) / bursts
	t.Logf("%d bytes allocated per burst of three chunks (a whole chunk's message is ~85 KB)", perBurst)
	if perBurst > 20<<10 {
		t.Errorf("a burst of three chunks allocated %d bytes: new message buffers", perBurst)
	}
}
