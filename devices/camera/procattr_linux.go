package camera

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the camera program get SIGKILL if the agent's process dies without
// stopping it (a crash, SIGKILL), so that no camera is left held by an orphan.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
