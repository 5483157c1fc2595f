package realtime

import (
	"math"
	"testing"
)

// The decoders read what a server sends: any bytes must give events or errors, never a panic,
// and every AudioDelta must hold finite samples.

func fuzzSeeds(f *testing.F, frames ...string) {
	for _, s := range frames {
		f.Add([]byte(s), false)
	}
	f.Add([]byte{0, 1, 2, 3}, true)
}

func checkEvents(t *testing.T, c codec, data []byte, bin bool) {
	c.decode(bin, data, func(ev Event) {
		switch ev := ev.(type) {
		case AudioDelta:
			for _, s := range ev.Samples {
				if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
					t.Fatalf("non-finite sample delivered from %q", data)
				}
			}
		case ErrorEvent:
			if ev.Err == nil || ev.Err.Message == "" {
				t.Fatalf("error event without a message from %q", data)
			}
		}
	})
}

func FuzzDecodeCurrent(f *testing.F) {
	fuzzSeeds(f,
		`{"type":"session.queued","position":2,"estimated_wait_s":20,"ticket_id":"q_1","queue_length":3}`,
		`{"type":"session.created","session_id":"sess_1","mode":"full_duplex","metrics":{},"server_send_ts":1.5}`,
		`{"type":"response.output.delta","kind":"audio","audio":"AAAAPw==","metrics":{"kv_cache_length":5}}`,
		`{"type":"response.output.delta","kind":"text","text":"hi"}`,
		`{"type":"response.done","text":"t","audio":"AAAAPw=="}`,
		`{"type":"session.closed","reason":"timeout","diagnostic":{"message":"x"}}`,
		`{"type":"error","error":{"code":"queue_full","message":"m"}}`,
	)
	f.Fuzz(func(t *testing.T, data []byte, bin bool) {
		checkEvents(t, &miniCPM{mode: ModeVideo}, data, bin)
	})
}

func FuzzDecodeLegacy(f *testing.F) {
	fuzzSeeds(f,
		`{"type":"response.output_audio.delta","text":"a","audio":"AAAAPw==","end_of_turn":true,"kv_cache_length":9}`,
		`{"type":"response.listen","kv_cache_length":1024}`,
		`{"type":"session.closed","reason":"context_full"}`,
	)
	f.Fuzz(func(t *testing.T, data []byte, bin bool) {
		checkEvents(t, &miniCPM{legacy: true, mode: ModeAudio}, data, bin)
	})
}

func FuzzDecodeOpenVoice(f *testing.F) {
	fuzzSeeds(f,
		`{"type":"transcript.final","text":"x","language":"en","duration":3.42}`,
		`{"type":"error","message":"m","recoverable":false}`,
		`{"type":"tts.speaking_start"}`,
	)
	f.Fuzz(func(t *testing.T, data []byte, bin bool) {
		checkEvents(t, &openVoice{ttsRate: 24000}, data, bin)
	})
}

func FuzzFloat32Base64(f *testing.F) {
	f.Add("AAAAPw==")
	f.Add("")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, s string) {
		samples, err := decodeFloat32Base64(s)
		if err != nil {
			return
		}
		again, err := decodeFloat32Base64(string(appendFloat32Base64(nil, samples)))
		if err != nil || len(again) != len(samples) {
			t.Fatalf("re-encoding %d samples failed: %v", len(samples), err)
		}
		for i := range again {
			if math.Float32bits(again[i]) != math.Float32bits(samples[i]) {
				t.Fatalf("sample %d changed", i)
			}
		}
	})
}
