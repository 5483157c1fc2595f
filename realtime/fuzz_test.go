package realtime

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
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
		samples, err := decodeFloat32Base64([]byte(s))
		if err != nil {
			return
		}
		again, err := decodeFloat32Base64(appendFloat32Base64(nil, samples))
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

// The fast path gives exactly the general decoder's events, for any input: where it cannot, it
// must leave the frame to the general decoder.
func FuzzFastFrame(f *testing.F) {
	audio := string(appendFloat32Base64(nil, []float32{0.5, -0.25, 0.125}))
	for _, s := range []string{
		`{"type":"response.output.delta","kind":"audio","session_id":"s","response_id":"r","audio":"` + audio + `","metrics":{"kv_cache_length":5},"server_send_ts":1.5}`,
		`{"type":"response.output_audio.delta","text":"héllo \u00e9","audio":"` + audio + `","end_of_turn":true,"kv_cache_length":9}`,
		`{"type":"response.done","text":"t","audio":"` + audio + `","reason":"turn_end"}`,
		` { "audio" : "` + audio + `" , "type" : "response.output.delta" , "kind" : "audio" } `,
		`{"type":"response.output.delta","kind":"audio","audio":"` + audio + `","Audio":"AAAA"}`,
		`{"type":"response.output.delta","kind":"audio","audio":"` + audio + `","audio":"AAAA"}`,
		`{"type":"response.output.delta","kind":"audio","audio":"AAAAAAA="}`,
		`{"type":"response.output.delta","kind":"audio","audio":"AAAA\nAAAA"}`,
		`{"type":"response.output.delta","kind":"audio","audio":"` + audio + `","metrics":{"kv_cache_length":"x"}}`,
		`{"type":"response.output.delta","kind":"audio","audio":"` + audio + `","x":[1,{"a":"}"}]}`,
		`{"type":"response.output.delta","kind":"audio","audio":"` + audio + `"} x`,
		`{"type":"response.output.delta","kind":"audio","audio":"` + audio + `",}`,
		`{"TYPE":"response.output.delta","Kind":"audio","audio":"` + audio + `","kind":"text"}`,
		`{"type":"response.output.delta","kind":"audio","audio":"//8AAP//AAA="}`,
		`{"type":"response.output.delta","kind":"listen","session_id":"s","response_id":"r","input_id":"i","metrics":{"kv_cache_length":12,"backend":"cpp","prefill_ms":1.25e1,"wall_clock_ms":-0.0,"n_tokens":3,"chunk_index":7},"server_send_ts":1764000000.125}`,
		`{"type":"response.step.done","session_id":"s","response_id":"r"}`,
		`{"type":"session.queued","position":2,"estimated_wait_s":3.5,"ticket_id":"t","queue_length":4}`,
		`{"type":"response.listen","kv_cache_length":null,"text":"\ud83d\ude00 \ud83d x\udc00\u00e9\/\n\"","end_of_turn":null,"metrics":null}`,
		"{\"type\":\"response.output.delta\",\"kind\":\"text\",\"text\":\"caf\xe9 \xed\xa0\x80\"}",
		`{"type":"session.created","session_id":"s","mode":"full_duplex","metrics":{"backend":"\u0063pp"}}`,
		`{"type":"response.output.delta","kind":"text","text":"a\"b\\","position":1E+2,"queue_length":-1.5e-3}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, legacy bool) {
		c := &miniCPM{legacy: legacy, mode: ModeAudio}
		fr, ok := c.fastFrame(data)
		if !ok {
			return
		}
		checkSameFrame(t, data, fr)
		var fast, general []Event
		c.emitFrame(fr, func(ev Event) { fast = append(fast, ev) })
		c.decodeGeneral(false, data, func(ev Event) { general = append(general, ev) })
		if !reflect.DeepEqual(fast, general) {
			t.Fatalf("%q:\nfast    %#v\ngeneral %#v", data, fast, general)
		}
	})
}

// checkSameFrame holds a frame the fast path took to what encoding/json makes of the same bytes,
// field by field.
func checkSameFrame(t *testing.T, data []byte, fast *miniFrame) {
	t.Helper()
	var want miniFrame
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("%q: the fast path took a frame encoding/json refuses: %v", data, err)
	}
	if want.Diagnostic != nil || want.Error != nil {
		t.Fatalf("%q: the fast path took a frame with diagnostic or error", data)
	}
	if want.Audio != nil {
		samples, err := decodeFloat32Base64(stringBytes(*want.Audio))
		if err != nil || fast.fastAudio == nil || !reflect.DeepEqual(samples, fast.fastAudio.samples) || fast.fastAudio.size != len(*want.Audio) {
			t.Fatalf("%q: audio differs", data)
		}
	} else if fast.fastAudio != nil {
		t.Fatalf("%q: audio where encoding/json has none", data)
	}
	got := *fast
	got.fastAudio, want.Audio = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nfast    %+v\ngeneral %+v", data, got, want)
	}
}

// The same over many seeded random cases that reach the vector code (inputs of a few hundred
// bytes, valid base64 with one byte changed anywhere), so that a plain test run on any
// architecture covers its edges without the fuzzing engine.
func TestBase64MatchesStd(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 64))
	for range 3000 {
		data := make([]byte, rng.IntN(400))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		checkBase64MatchesStd(t, data)
		enc := base64.StdEncoding.EncodeToString(data)
		if len(enc) == 0 {
			continue
		}
		bad := []byte(enc)
		bad[rng.IntN(len(bad))] = "=!\n\r -_A/+\x00\xff"[rng.IntN(12)]
		checkBase64MatchesStd(t, bad)
		checkBase64MatchesStd(t, bad[:rng.IntN(len(bad))])
	}
}

// The fast base64 gives exactly encoding/base64's bytes and errors, for any input, and writes
// nothing past the end of the buffer it is given.
func FuzzBase64MatchesStd(f *testing.F) {
	f.Add([]byte("AAAAPw=="))
	f.Add([]byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA!AAAA"))
	f.Add([]byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nAAA="))
	f.Add([]byte{})
	f.Fuzz(checkBase64MatchesStd)
}

func checkBase64MatchesStd(t *testing.T, data []byte) {
	std := base64.StdEncoding
	enc := appendBase64([]byte("x"), data)
	if want := std.AppendEncode([]byte("x"), data); !bytes.Equal(enc, want) {
		t.Fatalf("encoding %d bytes: %q, encoding/base64 says %q", len(data), enc, want)
	}
	n := std.DecodedLen(len(data))
	wantBuf := make([]byte, n)
	wantN, wantErr := std.Decode(wantBuf, data)
	mem := make([]byte, n+64)
	for i := range mem {
		mem[i] = 0xA5
	}
	gotN, gotErr := decodeBase64(mem[:n:n], data)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || gotN != wantN {
		t.Fatalf("decoding %q: %d %v, encoding/base64 says %d %v", data, gotN, gotErr, wantN, wantErr)
	}
	if wantErr == nil && !bytes.Equal(mem[:gotN], wantBuf[:wantN]) {
		t.Fatalf("decoding %q: %x, encoding/base64 says %x", data, mem[:gotN], wantBuf[:wantN])
	}
	for i := n; i < len(mem); i++ {
		if mem[i] != 0xA5 {
			t.Fatalf("decoding %q wrote byte %d past the %d-byte buffer", data, i, n)
		}
	}
}
