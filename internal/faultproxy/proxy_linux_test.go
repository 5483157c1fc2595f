package faultproxy

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A sender that resets the link during a stall loses only what the proxy never acknowledged:
// every byte its kernel saw acknowledged reaches the target after Resume, even while the target
// keeps talking to the gone sender and reads slowly (so that the proxy still holds bytes for it
// when the sender's reset arrives).
func TestAcknowledgedBytesSurviveSenderReset(t *testing.T) {
	// The target's receive buffer is small, so the proxy's writes wait in the proxy's own socket.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<10) })
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	startReading := make(chan struct{})
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		go func() { // the target talks all along: its replies to a gone sender go nowhere
			for {
				if _, err := c.Write([]byte("reply")); err != nil {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		<-startReading
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()

	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Stall()
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	client := conn.(*net.TCPConn)
	_ = client.SetWriteBuffer(16 << 10)
	_ = client.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	written, _ := client.Write(make([]byte, 1<<20)) // stops when the stalled proxy acknowledges no more
	raw, err := client.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	unacked, qerr := 0, error(nil)
	if err := raw.Control(func(fd uintptr) { unacked, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil || qerr != nil {
		t.Fatal(err, qerr)
	}
	acked := int64(written - unacked)
	if acked == 0 {
		t.Fatal("the stalled proxy acknowledged nothing: the test proves nothing")
	}
	_ = client.SetLinger(0)
	client.Close() // a reset: what was not acknowledged is dropped

	p.Resume()
	time.Sleep(200 * time.Millisecond) // the proxy forwards, finds the sender gone, and ends the pair
	close(startReading)
	select {
	case n := <-received:
		// More than was acknowledged may arrive (an acknowledgement still delayed at the reset),
		// never less, and never more than was written.
		if n < acked || n > int64(written) {
			t.Fatalf("the target received %d bytes, the sender saw %d of %d acknowledged", n, acked, written)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the target never saw the end of the stream")
	}
}
