package realtime

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkSendChunk1s is the whole upstream path of one second of audio over a loopback
// WebSocket: encode, queue, write, and follow the chunk until the peer acknowledges it. It reports
// the process's CPU time per second of media (the sink server's reading included, the same in
// every version).
func BenchmarkSendChunk1s(b *testing.B) {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.queue_done"}`))
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			switch {
			case strings.Contains(string(data[:min(len(data), 40)]), `"session.init"`):
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"s"}`))
			case strings.Contains(string(data[:min(len(data), 40)]), `"session.close"`):
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.closed","reason":"user_stop"}`))
			}
		}
	}))
	defer srv.Close()
	s, err := Dial(context.Background(), Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/realtime", Mode: ModeAudio})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range s.Events() {
		}
	}()
	chunk := Chunk{Audio: sine(InputSampleRate)}
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		chunk.ID = uint64(i + 1)
		if err := s.Send(context.Background(), chunk); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Close(ctx, "user_stop")
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-media")
}
