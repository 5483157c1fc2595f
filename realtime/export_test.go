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

// WriteBuffersForTest is how many write buffers b's sessions have had made (the slot was
// empty when one began a message), and how many b keeps now (0 or 1).
func WriteBuffersForTest(b *Buffers) (made int64, kept int) {
	return b.write.made.Load(), len(b.write.kept)
}
