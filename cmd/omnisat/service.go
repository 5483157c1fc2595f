package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/kardianos/service"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/agent/control"
)

// packagedUnits are where a package manager puts omnisat.service; `service install` writes its
// own unit to /etc/systemd/system, which would shadow the package's, so it refuses instead.
var packagedUnits = []string{"/lib/systemd/system/omnisat.service", "/usr/lib/systemd/system/omnisat.service"}

const serviceUsage = `usage: omnisat service <action> [-c FILE]

actions:
  install    write the systemd unit (running this binary with -c FILE) and enable it; create the
             omnisat system user (groups audio, video) when it is missing. Does not start it.
  uninstall  stop, disable and remove the unit written by install
  start, stop, restart
  status     is the unit installed and running, and what is the agent doing (its control socket)
  unit       print the unit install would write (--exec PATH for another binary path)
`

func runService(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		w, code := env.stderr, exitUsage
		if len(args) > 0 {
			w, code = env.stdout, exitOK
		}
		fmt.Fprint(w, serviceUsage)
		return code
	}
	action := args[0]
	fs := newFlagSet("service "+action, env, "")
	path := fs.String("c", defaultConfigPath, "configuration file the service runs with")
	var execPath, socket *string
	switch action {
	case "unit":
		execPath = fs.String("exec", "", "binary path for ExecStart (default: this binary)")
	case "status":
		socket = fs.String("socket", "", "control socket (default: control.socket of the configuration)")
	case "install", "uninstall", "start", "stop", "restart":
	default:
		fmt.Fprintf(env.stderr, "omnisat service: unknown action %q\n\n%s", action, serviceUsage)
		return exitUsage
	}
	if code, done := parseFlags(fs, args[1:]); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "omnisat service %s: unexpected argument %q\n", action, fs.Arg(0))
		return exitUsage
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(env.stderr, "omnisat service %s: "+format+"\n", append([]any{action}, a...)...)
		return exitFailure
	}
	config, err := filepath.Abs(*path)
	if err != nil {
		return fail("%v", err)
	}

	switch action {
	case "unit":
		bin := *execPath
		if bin == "" {
			if bin, err = os.Executable(); err != nil {
				return fail("%v", err)
			}
		}
		fmt.Fprint(env.stdout, renderUnit(bin, config))
		return exitOK
	case "status":
		return serviceStatus(ctx, env, config, *socket)
	}

	svc, err := newSystemService(config)
	if err != nil {
		return fail("%v", err)
	}
	if p := svc.Platform(); p != "linux-systemd" {
		return fail("the service needs systemd, and this system's service manager is %s (is systemd running?)", p)
	}
	switch action {
	case "install":
		for _, u := range packagedUnits {
			if _, err := os.Stat(u); err == nil {
				return fail("the omnisat package already installed %s: use systemctl enable --now omnisat", u)
			}
		}
		if err := ensureServiceUser(env.stdout); err != nil {
			return fail("%v", err)
		}
		if err := svc.Install(); err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(env.stdout, "installed and enabled /etc/systemd/system/omnisat.service (config %s); start it with: omnisat service start\n", config)
	case "uninstall":
		_ = svc.Stop() // stopping a stopped service fails; the unit goes all the same
		if err := svc.Uninstall(); err != nil {
			return fail("%v", err)
		}
		fmt.Fprintln(env.stdout, "stopped, disabled and removed omnisat.service")
	case "start":
		err = svc.Start()
	case "stop":
		err = svc.Stop()
	case "restart":
		err = svc.Restart()
	}
	if err != nil {
		return fail("%v", err)
	}
	return exitOK
}

// newSystemService is the omnisat unit as kardianos/service manages it: its SystemdScript is
// the unit already rendered, so what it installs is exactly what `service unit` prints.
func newSystemService(config string) (service.Service, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return service.New(noProgram{}, &service.Config{
		Name:        serviceName,
		DisplayName: serviceName,
		Description: "omnisat satellite of a realtime omni-modal model",
		Executable:  bin,
		Arguments:   []string{"run", "-c", config},
		Option:      service.KeyValue{"SystemdScript": renderUnit(bin, config)},
	})
}

// noProgram satisfies service.New: these commands manage the unit; the service itself is
// `omnisat run`, started by systemd, not through kardianos' Run.
type noProgram struct{}

func (noProgram) Start(service.Service) error { return nil }
func (noProgram) Stop(service.Service) error  { return nil }

// ensureServiceUser creates the omnisat system user, in the audio and video groups, when it is
// missing (the package's postinst does the same with adduser).
func ensureServiceUser(out io.Writer) error {
	if _, err := user.Lookup(serviceName); err == nil {
		return nil
	}
	cmd := exec.Command("useradd", "--system", "--user-group", "--groups", "audio,video",
		"--home-dir", "/var/lib/omnisat", "--no-create-home", "--shell", "/usr/sbin/nologin", serviceName)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("create the %s user: %v: %s", serviceName, err, strings.TrimSpace(string(b)))
	}
	fmt.Fprintf(out, "created the system user %s (groups audio, video)\n", serviceName)
	return nil
}

// serviceStatus prints whether the unit is installed and running (from systemd) and what the
// agent is doing (from its control socket). Exit 0 when the agent answered, 1 when not.
func serviceStatus(ctx context.Context, env *cliEnv, config, socket string) int {
	fmt.Fprintf(env.stdout, "service: %s\n", unitState(config))
	if socket == "" {
		socket = control.DefaultSocket
		if cfg, err := loadConfig(config, loadOptions{simulator: true, getenv: env.getenv}); err != nil {
			fmt.Fprintf(env.stdout, "config:  %v\n", err)
		} else {
			socket = cfg.socketPath()
			fmt.Fprintf(env.stdout, "config:  %s\n", config)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := control.Call(ctx, socket, control.Request{Cmd: "status"})
	switch {
	case err != nil:
		fmt.Fprintf(env.stdout, "agent:   not answering: %v\n", err)
		return exitFailure
	case !resp.OK || resp.Status == nil:
		fmt.Fprintf(env.stdout, "agent:   error: %s\n", resp.Error)
		return exitFailure
	}
	fmt.Fprintf(env.stdout, "agent:   %s\n", describeAgent(*resp.Status))
	return exitOK
}

// unitState is systemd's view of the unit in words.
func unitState(config string) string {
	svc, err := newSystemService(config)
	if err != nil {
		return "unknown: " + err.Error()
	}
	if p := svc.Platform(); p != "linux-systemd" {
		return "unknown: systemd is not running here (service manager " + p + ")"
	}
	st, err := svc.Status()
	switch {
	case errors.Is(err, service.ErrNotInstalled):
		return "not installed"
	case err != nil:
		return "installed, " + err.Error()
	case st == service.StatusRunning:
		return "installed, running"
	case st == service.StatusStopped:
		return "installed, stopped"
	}
	return "unknown"
}

// describeAgent is one line of what the agent is doing.
func describeAgent(st agent.Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", st.State)
	if st.Detail != "" {
		fmt.Fprintf(&b, " (%s)", st.Detail)
	}
	if !st.Since.IsZero() {
		fmt.Fprintf(&b, " for %s", time.Since(st.Since).Round(time.Second))
	}
	fmt.Fprintf(&b, "; %s/%s", st.Dialect, st.Mode)
	if st.SessionID != "" {
		fmt.Fprintf(&b, ", session %s (%.0f s)", st.SessionID, st.SessionAge)
	}
	fmt.Fprintf(&b, ", %d reconnects, %d rollovers", st.Reconnects, st.Rollovers)
	if st.Muted {
		b.WriteString(", microphone muted")
	}
	for _, dev := range []string{"microphone", "speaker", "camera"} {
		if s, ok := st.Devices[dev]; ok {
			fmt.Fprintf(&b, ", %s %s", dev, s)
		}
	}
	if st.LastError != "" {
		fmt.Fprintf(&b, "; last error: %s", st.LastError)
	}
	return b.String()
}
