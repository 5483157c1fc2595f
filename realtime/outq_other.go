//go:build !linux

package realtime

import (
	"net"
	"syscall"
)

// socketOf: raw socket calls are a Linux matter; elsewhere the connection's own Read and Write
// are used.
func socketOf(net.Conn) syscall.RawConn { return nil }

// rawRead, rawWrite, outq, bindRaw: no raw calls here.
type (
	rawRead  struct{}
	rawWrite struct{}
	outq     struct{}
)

func (c *countingConn) bindRaw() {}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(uint64(n))
	return n, err
}

// unacked: only Linux says how much of what was written the peer has acknowledged; elsewhere
// the session falls back to counting every chunk written within DeadLinkTimeout as unacknowledged.
func (c *countingConn) unacked() (written, unacked uint64, ok bool) { return 0, 0, false }
