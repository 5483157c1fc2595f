package realtime

import (
	"context"
	"net"
)

// EncodeAudioDeltaForTest is the base64 float32 encoding of reply audio, for benchmarks of the
// external test package.
func EncodeAudioDeltaForTest(samples []float32) string {
	return string(appendFloat32Base64(nil, samples))
}

// WithNetDialForTest makes c open its TCP connection with dial (tests that watch the socket).
func WithNetDialForTest(c Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) Config {
	c.netDial = dial
	return c
}

// WatchdogWakesForTest is how many times s's link watchdogs (silence, stall) have woken the
// process: expired, or found on expiry that they had been pushed back.
func WatchdogWakesForTest(s Session) (silence, stall int64) {
	ss := s.(*session)
	return ss.silence.Wakes(), ss.stall.Wakes()
}

// BuffersMadeForTest counts buffers of each kind: the write buffer, the read buffer, media
// messages' and reply samples'.
type BuffersMadeForTest struct{ Write, Read, Messages, Samples int64 }

// MadeForTest is how many buffers of each kind b's sessions have had to make (the kept ones did
// not serve).
func MadeForTest(b *Buffers) BuffersMadeForTest {
	return BuffersMadeForTest{Write: b.write.made.Load(), Read: b.read.made.Load(), Messages: b.spares.made.Load(),
		Samples: b.samples.made.Load()}
}
