package realtime_test

import (
	"context"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

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
