package realtime

import (
	"math/rand/v2"
	"net"
	"testing"
)

// bufferConn counts the send-buffer sizes asked of it.
type bufferConn struct {
	net.Conn
	asked []int
}

func (c *bufferConn) SetWriteBuffer(n int) error {
	c.asked = append(c.asked, n)
	return nil
}

// TestSendBufferGrowsInFewSteps: video chunks vary in size with every frame and creep upwards
// (a scene that gets busier); the send buffer keeps ahead of the largest of them with a few
// system calls, not one per new largest chunk.
func TestSendBufferGrowsInFewSteps(t *testing.T) {
	conn := &bufferConn{}
	s := &session{raw: conn}
	s.growSendBuffer(minSendBuffer) // as the dial does
	if len(conn.asked) != 1 || conn.asked[0] != minSendBuffer {
		t.Fatalf("at the dial: asked %v, want [%d]", conn.asked, minSendBuffer)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	largest, maxima := 0, 0
	for i := range 600 { // ten minutes of one chunk a second
		size := 85_000 + 20_000 + i*50 + rng.IntN(20_000) // audio + a JPEG that grows by half
		if size > largest {
			largest, maxima = size, maxima+1
		}
		s.growSendBuffer(size)
		if s.sendBuffer < size {
			t.Fatalf("chunk %d: %d bytes, send buffer %d", i, size, s.sendBuffer)
		}
	}
	if grew := len(conn.asked) - 1; grew > 3 {
		t.Errorf("the send buffer grew %d times for %d new largest chunks (asked %v), want ≤ 3", grew, maxima, conn.asked)
	}
	if last := conn.asked[len(conn.asked)-1]; last > largest+largest/4 {
		t.Errorf("send buffer %d for chunks of at most %d bytes: more headroom than a quarter", last, largest)
	}
	t.Logf("%d new largest chunks, up to %d bytes; send buffer asked %v", maxima, largest, conn.asked)
}
