package realtime_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/realtime"
)

// The whole read path of a live session on loopback: the WebSocket read, the JSON decode and the
// base64 to samples, per 1 s reply delta of 24 kHz audio (the server's writes are in the figure
// too; they are a prepared message, a copy and a syscall).
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
			// Wall time per delta, both ends of the loopback link included.
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/s-media")
		})
	}
}

// The whole send path of a live session on loopback: encoding a 1 s chunk of 16 kHz audio and
// writing it as a masked WebSocket message (the server's reads are in the figure too).
func BenchmarkSessionSendChunk1s(b *testing.B) {
	audio := make([]float32, realtime.InputSampleRate)
	for i := range audio {
		audio[i] = float32(i%160)/320 - 0.25
	}
	var got atomic.Int64
	more := make(chan struct{}, 1)
	s := benchSession(b, realtime.DialectCurrent, func(ws *websocket.Conn) {
		ws.SetReadLimit(1 << 20)
		for {
			_, r, err := ws.NextReader()
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				return
			}
			got.Add(1)
			select {
			case more <- struct{}{}:
			default:
			}
		}
	})
	go func() {
		for range s.Events() {
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := s.Send(context.Background(), realtime.Chunk{Audio: audio}); err != nil {
			b.Fatal(err)
		}
	}
	for got.Load() < int64(b.N) {
		<-more
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/s-media")
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
