//go:build !linux

package realtime

import "net"

// unackedBytes: only Linux says how much of what was written the peer has acknowledged; elsewhere
// the session falls back to counting every chunk written within DeadLinkTimeout as unacknowledged.
func unackedBytes(net.Conn) (uint64, bool) { return 0, false }
