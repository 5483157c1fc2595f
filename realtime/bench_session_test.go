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
			// Control messages are small; a chunk's 85 KB need not be searched.
			switch ctl := len(data) < 1024; {
			case ctl && strings.Contains(string(data), `"session.init"`):
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"s"}`))
			case ctl && strings.Contains(string(data), `"session.close"`):
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
	before := processCPU()
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
	b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "ms-cpu/s-media")
}

// BenchmarkSessionReadAudioDelta1s is the whole downstream path of one second of reply audio
// (24 kHz) over a loopback WebSocket: the read, the JSON decode and the base64 to samples, up to
// the AudioDelta event. It reports the process's CPU time per second of media (the server's
// writes of a prepared message included, the same in every version).
func BenchmarkSessionReadAudioDelta1s(b *testing.B) {
	samples := make([]float32, realtime.OutputSampleRate)
	for i := range samples {
		samples[i] = float32(i%200)/400 - 0.25
	}
	delta := realtime.EncodeAudioDeltaForTest(samples)
	for _, d := range []realtime.Dialect{realtime.DialectCurrent, realtime.DialectLegacy} {
		b.Run(string(d), func(b *testing.B) {
			frame := []byte(`{"type":"response.output.delta","kind":"audio","session_id":"sess_1","response_id":"sess_1_resp_1","input_id":"i","audio":"` +
				delta + `","metrics":{"backend":"x","kv_cache_length":1024,"chunk_index":7},"server_send_ts":1714200000.25}`)
			if d == realtime.DialectLegacy {
				frame = []byte(`{"type":"response.output_audio.delta","text":"","audio":"` + delta + `","end_of_turn":false,"kv_cache_length":1024}`)
			}
			pm, err := websocket.NewPreparedMessage(websocket.TextMessage, frame)
			if err != nil {
				b.Fatal(err)
			}
			send := make(chan int)
			s := benchSession(b, d, func(ws *websocket.Conn) {
				go func() {
					for {
						if _, _, err := ws.ReadMessage(); err != nil {
							return
						}
					}
				}()
				for n := range send {
					for range n {
						if ws.WritePreparedMessage(pm) != nil {
							return
						}
					}
				}
			})
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			before := processCPU()
			b.ResetTimer()
			send <- b.N
			got := 0
			for got < b.N {
				if d, ok := (<-s.Events()).(realtime.AudioDelta); ok {
					if len(d.Samples) != realtime.OutputSampleRate {
						b.Fatalf("%d samples", len(d.Samples))
					}
					got++
				}
			}
			b.StopTimer()
			close(send)
			b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "ms-cpu/s-media")
		})
	}
}

// benchSession opens a session of dialect with a server that queues, greets, and then plays.
func benchSession(b *testing.B, d realtime.Dialect, play func(ws *websocket.Conn)) realtime.Session {
	url := scriptServer(b, func(ws *websocket.Conn) {
		ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.queue_done"}`))
		if _, _, err := ws.ReadMessage(); err != nil { // the init
			return
		}
		ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"sess_1"}`))
		play(ws)
	})
	s, err := realtime.Dial(context.Background(), realtime.Config{URL: url, Dialect: d, Mode: realtime.ModeAudio,
		MaxFrameBytes: 1 << 20, DeadLinkTimeout: time.Minute, PingInterval: 30 * time.Second, CloseTimeout: 100 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(context.Background(), "") })
	return s
}

// processCPU is the CPU time the process has used so far, in nanoseconds.
func processCPU() int64 {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return u.Utime.Nano() + u.Stime.Nano()
}
