package audio

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/signaltest"
	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/pipeline/aec"
)

// readFor reads mic until stop is closed, then for tail longer.
func readAll(ctx context.Context, t *testing.T, mic *Microphone, stop <-chan struct{}, out *[]float32) {
	p := make([]float32, 320)
	for {
		n, err := mic.Read(ctx, p)
		if err != nil {
			t.Error(err)
			return
		}
		*out = append(*out, p[:n]...)
		select {
		case <-stop:
			return
		default:
		}
	}
}

// TestEchoCancellationOnVirtualCard: the speaker's output comes back into the microphone through
// a loopback (attenuated, delayed); a microphone with the canceller removes it, one without
// shows how much there was. Both capture the same sink at the same time, so their outputs line
// up to within a callback, which is far finer than the 1 s windows the energies are taken over.
func TestEchoCancellationOnVirtualCard(t *testing.T) {
	card := testaudio.Start(t)
	far := card.Speech(t, "This is the model speaking through the loudspeaker. The microphone hears every word of it, "+
		"and the echo canceller has to take it out again, sentence after sentence, without touching the user.")
	user := card.Speech(t, "Hello, I am the user and I interrupt you.")
	farSrc, farRate := readWAV(t, far)
	userSrc, userRate := readWAV(t, user)
	unload, err := card.LoadEchoPath(60, -6)
	if err != nil {
		t.Fatal(err)
	}
	defer unload()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref := NewEchoReference()
	spk, err := OpenSpeaker(ctx, SpeakerConfig{Device: "pulse", Volume: 100, Latency: 50 * time.Millisecond, Echo: ref}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer spk.Close()
	raw, err := OpenMicrophone(ctx, MicConfig{Device: "pulse", Channel: Mixdown, Latency: 100 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	clean, err := OpenMicrophone(ctx, MicConfig{Device: "pulse", Channel: Mixdown, Latency: 100 * time.Millisecond,
		Clean: CleanConfig{Echo: EchoAEC, Reference: ref, Processor: aec.Config{Denoise: true}}}, nil,
		slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	defer clean.Close()
	// Both streams running before anything plays.
	p := make([]float32, 320)
	raw.Read(ctx, p)
	clean.Read(ctx, p)
	// PulseAudio's streams settle during their first seconds (timestamps drift): play after.
	for range 2 * OutputRate / len(p) {
		raw.Read(ctx, p)
		clean.Read(ctx, p)
	}

	stop := make(chan struct{})
	var rawOut, cleanOut []float32
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); readAll(ctx, t, raw, stop, &rawOut) }()
	go func() { defer wg.Done(); readAll(ctx, t, clean, stop, &cleanOut) }()

	spk.Play(resampleTo(t, farSrc, farRate, InputRate))
	farDur := time.Duration(float64(len(farSrc)) / float64(farRate) * float64(time.Second))
	time.Sleep(farDur / 2)
	if err := card.PlayInto(user); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Now().Add(farDur/2 + time.Second)))
	close(stop)
	wg.Wait()

	far16 := resampleTo(t, farSrc, farRate, OutputRate)
	user16 := resampleTo(t, userSrc, userRate, OutputRate)
	echoAt, echoNCC := signaltest.Align(far16, rawOut)
	userAt, _ := signaltest.Align(user16, rawOut)
	t.Logf("echo at %.2f s of the raw capture (ncc %.3f), user at %.2f s; stats %+v", float64(echoAt)/OutputRate, echoNCC,
		float64(userAt)/OutputRate, clean.Stats().Clean)
	n := min(len(rawOut), len(cleanOut))
	for s := echoAt; s+OutputRate <= min(n, echoAt+len(far16)); s += OutputRate {
		t.Logf("%4.1f s: raw %6.1f dB, cleaned %6.1f dB", float64(s-echoAt)/OutputRate, signaltest.LevelDB(rawOut[s:s+OutputRate]), signaltest.LevelDB(cleanOut[s:s+OutputRate]))
	}
	a, b := echoAt+2*OutputRate, min(userAt, n)
	erle := signaltest.LevelDB(rawOut[a:b]) - signaltest.LevelDB(cleanOut[a:b])
	_, dt := signaltest.Align(user16, cleanOut[max(0, userAt-OutputRate/2):min(n, userAt+len(user16)+OutputRate/2)])
	t.Logf("ERLE %.1f dB after 2 s; double talk ncc %.3f", erle, dt)
	if erle < 20 {
		t.Errorf("ERLE %.1f dB, want ≥ 20", erle)
	}
	if dt < 0.7 {
		t.Errorf("double talk ncc %.3f, want ≥ 0.7", dt)
	}
}

// The reference's peak over any stretch, across the ring's wrap and past what was played or
// kept, is the loudest magnitude a plain scan of what is there finds.
func TestEchoReferencePeak(t *testing.T) {
	r := NewEchoReference()
	r.buf = make([]float32, 8)
	played := make([]float32, 13)
	for i := range played {
		played[i] = float32(i%5) / 10
		if i%3 == 0 {
			played[i] = -played[i]
		}
	}
	r.mu.Lock()
	r.appendLocked(played, len(played))
	r.mu.Unlock()
	for from := int64(-2); from < 16; from++ {
		for n := 0; n < 12; n++ {
			var want float32
			for j := max(from, int64(len(played)-len(r.buf)), 0); j < min(from+int64(n), int64(len(played))); j++ {
				want = max(want, played[j], -played[j])
			}
			if got := r.peak(from, n); got != want {
				t.Fatalf("peak(%d, %d) = %v, want %v", from, n, got, want)
			}
		}
	}
}
