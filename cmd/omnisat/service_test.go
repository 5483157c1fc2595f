package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// unitKeys reads a unit file into section -> key -> values (a key may repeat).
func unitKeys(t *testing.T, unit string) map[string]map[string][]string {
	t.Helper()
	sections := map[string]map[string][]string{}
	var cur map[string][]string
	sc := bufio.NewScanner(strings.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = map[string][]string{}
			sections[strings.Trim(line, "[]")] = cur
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == nil {
				t.Fatalf("unit line %q is not key=value inside a section", line)
			}
			cur[k] = append(cur[k], v)
		}
	}
	return sections
}

// The package ships the unit rendered from the one template: the committed file must be it.
func TestPackagedUnitIsTheTemplate(t *testing.T) {
	committed, err := os.ReadFile("../../packaging/omnisat.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := renderUnit(packagedBinary, defaultConfigPath); string(committed) != want {
		t.Fatalf("packaging/omnisat.service differs from the template; regenerate it with\n"+
			"  go run ./cmd/omnisat service unit --exec %s -c %s > packaging/omnisat.service", packagedBinary, defaultConfigPath)
	}
}

func TestUnitContent(t *testing.T) {
	u := unitKeys(t, renderUnit(packagedBinary, defaultConfigPath))
	one := func(section, key, want string) {
		t.Helper()
		if got := u[section][key]; len(got) != 1 || got[0] != want {
			t.Errorf("[%s] %s=%q; want exactly %q", section, key, got, want)
		}
	}
	words := func(section, key string, want ...string) {
		t.Helper()
		var have []string
		for _, v := range u[section][key] {
			have = append(have, strings.Fields(v)...)
		}
		for _, w := range want {
			if !slices.Contains(have, w) {
				t.Errorf("[%s] %s=%q lacks %s", section, key, have, w)
			}
		}
	}
	one("Service", "ExecStart", "/usr/bin/omnisat run -c /etc/omnisat/omnisat.yaml")
	one("Service", "User", "omnisat")
	one("Service", "Group", "omnisat")
	words("Service", "SupplementaryGroups", "audio", "video")
	one("Service", "Restart", "on-failure")
	one("Service", "RestartSec", "5s")
	one("Service", "ExecReload", "/bin/kill -HUP $MAINPID")
	words("Unit", "After", "network-online.target", "sound.target")
	words("Unit", "Wants", "network-online.target")
	one("Install", "WantedBy", "multi-user.target")
	one("Service", "StateDirectory", "omnisat")
	one("Service", "ConfigurationDirectory", "omnisat")
	for _, key := range []string{"NoNewPrivileges", "ProtectHome", "PrivateTmp", "ProtectKernelTunables",
		"ProtectKernelModules", "ProtectControlGroups", "RestrictNamespaces", "LockPersonality", "RestrictRealtime"} {
		one("Service", key, "yes")
	}
	one("Service", "ProtectSystem", "strict")
	one("Service", "RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK")
	// What would take /dev/snd or /dev/video* away: a private /dev, a device allow list (set
	// outright or implied by ProtectClock), or user namespacing that maps audio and video away.
	for _, key := range []string{"PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock", "PrivateUsers", "DynamicUser"} {
		if v, set := u["Service"][key]; set {
			t.Errorf("[Service] %s=%q would cut the service off its sound or video devices", key, v)
		}
	}
}

func TestQuoteUnitWord(t *testing.T) {
	for _, tt := range []struct {
		in       string
		argument bool
		want     string
	}{
		{"/usr/bin/omnisat", false, "/usr/bin/omnisat"},
		{"/etc/omnisat/a_b-c.yml", true, "/etc/omnisat/a_b-c.yml"},
		{"/srv/my kiosk/o.yaml", true, `"/srv/my kiosk/o.yaml"`},
		{`/srv/a"b\c`, true, `"/srv/a\"b\\c"`},
		{"/srv/100%/$HOME", true, `"/srv/100%%/$$HOME"`},
		{"/srv/100%/$HOME/omnisat", false, `"/srv/100%%/$HOME/omnisat"`},
		{"", true, `""`},
	} {
		if got := quoteUnitWord(tt.in, tt.argument); got != tt.want {
			t.Errorf("quoteUnitWord(%q, %v) = %s; want %s", tt.in, tt.argument, got, tt.want)
		}
	}
}

// systemd itself reads the unit: no unknown key, no bad value, and an ExecStart whose quoted
// path (spaces, %, $) names the real executable.
func TestUnitVerifiesWithSystemd(t *testing.T) {
	needTool(t, "systemd-analyze")
	dir := filepath.Join(t.TempDir(), "odd dir 100% $x")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "omnisat")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "omnisat.service")
	if err := os.WriteFile(unit, []byte(renderUnit(bin, "/etc/omnisat/my config.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// A misspelt key is only a warning to systemd: make sure the check above would see one.
	bad := strings.Replace(renderUnit(bin, defaultConfigPath), "NoNewPrivileges=", "NoNewPrivilege=", 1)
	os.WriteFile(unit, []byte(bad), 0o644)
	if out, _ := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); !strings.Contains(string(out), "NoNewPrivilege") {
		t.Fatalf("systemd-analyze verify did not report a misspelt key: %q", out)
	}
}

func TestServiceCommandLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"service"}, exitUsage, "usage: omnisat service"},
		{[]string{"service", "dance"}, exitUsage, `unknown action "dance"`},
		{[]string{"service", "install", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"service", "status", "--nope"}, exitUsage, "flag provided but not defined"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
	// A relative -c becomes absolute: systemd starts the service in its state folder.
	code, out, _ := runCLI(t, "service", "unit", "--exec", "/opt/omnisat/bin/omnisat", "-c", "conf/o.yaml")
	abs, _ := filepath.Abs("conf/o.yaml")
	if code != 0 || !strings.Contains(out, "\nExecStart=/opt/omnisat/bin/omnisat run -c "+abs+"\n") {
		t.Fatalf("service unit: exit %d\n%s", code, out)
	}
}

// Without systemd, install and the others refuse plainly and write nothing. (Where systemd runs,
// this test does nothing: tests never install into the machine's real service manager.)
func TestServiceWithoutSystemd(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd runs here: the install path is not exercised against the real system")
	}
	for _, action := range []string{"install", "uninstall", "start", "stop", "restart"} {
		code, _, stderr := runCLI(t, "service", action, "-c", "../../configs/demo/demo.yaml")
		if code != exitFailure || !strings.Contains(stderr, "the service needs systemd") {
			t.Errorf("service %s: exit %d %q", action, code, stderr)
		}
	}
	if _, err := os.Stat("/etc/systemd/system/omnisat.service"); err == nil {
		t.Error("a unit was written to /etc/systemd/system")
	}
}

// status finds the agent through the configuration's control socket and tells what it does.
func TestServiceStatusAsksTheAgent(t *testing.T) {
	buildProgram(t, simulatorProgram())
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	cfg := writeSpeechFileConfig(t, dir, "control:\n  socket: "+sock+"\nlog:\n  level: warn\n")

	code, out, _ := runCLI(t, "service", "status", "-c", cfg)
	if code != exitFailure || !strings.Contains(out, "agent:   not answering") || !strings.Contains(out, "service: ") {
		t.Fatalf("status with no agent: exit %d\n%s", code, out)
	}

	var runOut, runErr syncBuffer
	env := &cliEnv{stdout: &runOut, stderr: &runErr, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "--simulator", "-c", cfg}, env) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(time.Minute) // generous: a busy machine starts the agent slowly
	for {
		code, out, _ = runCLI(t, "service", "status", "-c", cfg)
		if code == exitOK && strings.Contains(out, "agent:   listening") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != exitOK || !strings.Contains(out, "agent:   listening") || !strings.Contains(out, "current/audio, session ") ||
		!strings.Contains(out, "config:  "+cfg) {
		t.Fatalf("status with a running agent: exit %d\n%s\nagent output: %s %s", code, out, runOut.String(), runErr.String())
	}
}
