package realtime_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/realtime"
)

// BenchmarkSendChunk1s is the whole upstream path of one second of audio over a loopback
// WebSocket: encode, queue, write, and follow the chunk until the peer acknowledges it. It reports
// the process's CPU time per second of media (the sink server's reading included, the same in
// every version).
func BenchmarkSendChunk1s(b *testing.B) {
	url := scriptServer(b, func(ws *websocket.Conn) {
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.queue_done"}`))
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			switch head := string(data[:min(len(data), 40)]); {
			case strings.Contains(head, `"session.init"`):
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"s"}`))
			case strings.Contains(head, `"session.close"`):
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.closed","reason":"user_stop"}`))
			}
		}
	})
	s, err := realtime.Dial(context.Background(), realtime.Config{URL: url, Mode: realtime.ModeAudio})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range s.Events() {
		}
	}()
	chunk := realtime.Chunk{Audio: tone(realtime.InputSampleRate, 0.3)}
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
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "ms-cpu/s-media")
}
