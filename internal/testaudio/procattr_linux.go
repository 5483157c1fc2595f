package testaudio

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the daemon receive SIGTERM when the test process dies, so that a test
// binary that crashes (no Cleanup runs) does not leave a PulseAudio behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
