package pipeline

import "math"

// EnergyVAD is a small voice activity detector: RMS level over 20 ms frames against a threshold,
// with a short attack (speech must last MinSpeech) and a longer release (silence must last
// Hangover) so single clicks and the gaps between words do not toggle it.
type EnergyVAD struct {
	threshold  float64 // linear RMS
	frame      int     // samples per analysis frame
	attack     int     // frames of speech needed to switch on
	release    int     // frames of silence needed to switch off
	speaking   bool
	run        int // consecutive frames disagreeing with the current state
	gap        int // quiet frames in the current attack
	attackGap  int // quiet frames the attack bridges (SetAttackGap)
	pos        int
	sumSquares float64
}

// NewEnergyVAD makes a detector for audio at rate Hz. thresholdDBFS is the RMS level that counts
// as speech (e.g. -40); minSpeechMS and hangoverMS set the attack and release.
func NewEnergyVAD(rate int, thresholdDBFS float64, minSpeechMS, hangoverMS int) *EnergyVAD {
	frame := rate / 50
	if frame < 1 {
		frame = 1
	}
	return &EnergyVAD{
		threshold: math.Pow(10, thresholdDBFS/20),
		frame:     frame,
		attack:    max(1, minSpeechMS/20),
		release:   max(1, hangoverMS/20),
	}
}

// SetAttackGap lets up to frames quiet analysis frames (20 ms each) in a row pause the
// attack instead of restarting it: the closure of a stop consonant ("stop", "wait") is silent
// for 40-80 ms, and without this, speech that begins with one confirms only after it.
func (v *EnergyVAD) SetAttackGap(frames int) { v.attackGap = max(0, frames) }

// Rising reports whether speech may be starting: the detector is not speaking, but the last
// frame was loud (the attack has begun and may yet confirm it). A caller that must act quickly
// on speech can prepare for it here, before the minimum duration has passed.
func (v *EnergyVAD) Rising() bool { return !v.speaking && v.run > 0 }

// Speaking reports the current decision.
func (v *EnergyVAD) Speaking() bool { return v.speaking }

// Process analyses samples and reports the decision after them, and whether it changed.
func (v *EnergyVAD) Process(samples []float32) (speaking, changed bool) {
	before := v.speaking
	for len(samples) > 0 {
		n := min(v.frame-v.pos, len(samples))
		v.sumSquares += sumSquares(samples[:n])
		v.pos += n
		samples = samples[n:]
		if v.pos < v.frame {
			break
		}
		loud := math.Sqrt(v.sumSquares/float64(v.frame)) >= v.threshold
		v.pos, v.sumSquares = 0, 0
		if !v.speaking && !loud && v.run > 0 && v.gap < v.attackGap {
			v.gap++ // a short pause in rising speech (a stop consonant) keeps the attack going
			continue
		}
		v.gap = 0
		if loud == v.speaking {
			v.run = 0
			continue
		}
		v.run++
		if (loud && v.run >= v.attack) || (!loud && v.run >= v.release) {
			v.speaking = loud
			v.run = 0
		}
	}
	return v.speaking, v.speaking != before
}

// sumSquares is the sum of the squares of x. The bulk goes through the resampler's vector inner
// product (dot), sixteen samples at a time: a VAD reads every captured sample, and the agent
// runs two of them on the same audio. The rest, and dotGo's platforms, sum in plain Go.
func sumSquares(x []float32) float64 {
	bulk := len(x) &^ 15
	s := 0.0
	if bulk > 0 {
		s = float64(dot(x[:bulk], x[:bulk]))
	}
	for _, v := range x[bulk:] {
		s += float64(v) * float64(v)
	}
	return s
}
