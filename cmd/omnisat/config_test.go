package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/internal/yamlconf"
)

const exampleFile = "../../configs/omnisat.example.yaml"

func writeConfig(t *testing.T, text string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "omnisat.yaml")
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask may have narrowed it
		t.Fatal(err)
	}
	return path
}

func absPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// The example printed by the binary is the file in configs/, byte for byte, and it loads.
func TestConfigExample(t *testing.T) {
	code, out, _ := runCLI(t, "config", "example")
	want, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	if code != exitOK || out != string(want) {
		t.Fatalf("config example: exit %d, output differs from %s (%d vs %d bytes)", code, exampleFile, len(out), len(want))
	}
	testaudio.Start(t) // the example names the default microphone and speaker: check opens them
	code, out, stderr := runCLI(t, "config", "check", "-c", exampleFile)
	if code != exitOK || !strings.Contains(out, ": ok (") || stderr != "" {
		t.Fatalf("config check of the example: exit %d\n%s%s", code, out, stderr)
	}
}

// Every key the program reads is in the example, at its place, with a value of the right type:
// uncommenting every "#key:" line gives a file that decodes without a single problem.
func TestConfigExampleCoversEveryKey(t *testing.T) {
	raw, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	uncommented := regexp.MustCompile(`(?m)^(\s*)#([a-z_]+:)`).ReplaceAllString(string(raw), "$1$2")
	var c fileConfig
	if err := yamlconf.Decode([]byte(uncommented), &c, envOf(map[string]string{"OMNISAT_TOKEN": "t", "MQTT_PASSWORD": "p"})); err != nil {
		t.Fatalf("the example with every setting uncommented:\n%v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(uncommented), &doc); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	var collect func(n *yaml.Node, prefix string)
	collect = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			path := strings.TrimPrefix(prefix+"."+n.Content[i].Value, ".")
			present[path] = true
			collect(n.Content[i+1], path)
		}
	}
	collect(doc.Content[0], "")
	for _, key := range yamlconf.Keys(reflect.TypeOf(fileConfig{})) {
		if !present[key] && !present[strings.Split(key, ".")[0]+".config"] {
			t.Errorf("%s is missing from %s", key, exampleFile)
		}
	}
}

// Three lines are a working configuration; everything else has its default.
func TestConfigMinimal(t *testing.T) {
	path := writeConfig(t, "server:\n  url: wss://gw.example/v1/realtime\n  mode: audio\n  instructions: Be brief.\n", 0o600)
	c, err := loadConfig(path, loadOptions{getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if c.DeviceID != host || c.Server.Mode != "audio" || c.Server.Dialect != "current" || c.Session.Chunk != time.Second ||
		c.Audio.Input != "default" || c.Camera.Source != "none" || c.MQTT.Enabled() || c.StateDir != "/var/lib/omnisat" {
		t.Fatalf("defaults: %+v", c)
	}
}

// Each kind of field refuses bad values with its key path, the value and what is allowed; a
// file with many problems lists them all.
func TestConfigProblems(t *testing.T) {
	base := "server:\n  url: ws://gw/v1/realtime\n"
	for _, tt := range []struct{ yaml, want string }{
		{"server:\n  url: ws://gw/v1/realtime\n  mode: vidoe\n", `server.mode: "vidoe" is not one of video, audio, chat`},
		{"server:\n  url: http://gw\n", `server.url: "http://gw": scheme "http" is not ws or wss`},
		{base + "sesion: {}\n", `sesion: unknown key; did you mean "session"?`},
		{base + "mqtt:\n  tls:\n    ca: x\n", `mqtt.tls.ca: unknown key`},
		{base + "session:\n  chunk: fast\n", `session.chunk: "fast" is not a duration (such as 500ms, 1s, 2m)`},
		{base + "session:\n  chunk: 1\n", `session.chunk: 1 has no unit`},
		{base + "session:\n  chunk: 2s\n", `session.chunk: 2s is outside 250ms..1s`},
		{base + "session:\n  frames_per_chunk: two\n", `session.frames_per_chunk: "two" is not a whole number`},
		{base + "session:\n  overlap: sometimes\n", `session.overlap: "sometimes" is not true or false`},
		{base + "session:\n  vad_threshold_dbfs: loud\n", `session.vad_threshold_dbfs: "loud" is not a number`},
		{base + "session:\n  policy: never\n", `session.policy: "never" is not one of always, on_demand, voice`},
		{base + "server:\n  hot_words: omnisat\n", `server: appears twice`},
		{"server:\n  url: ws://gw/v1/realtime\n  hot_words: omnisat\n", `server.hot_words: is "omnisat"; want a list`},
		{"server:\n  url: ws://gw/v1/realtime\n  config: [1]\n", `server.config: is a list; want a mapping`},
		{base + "audio: loud\n", `audio: is "loud"; want a section of keys`},
		{base + "audio:\n  volume: 120\n", `audio.volume: 120 is outside 0..100`},
		{base + "audio:\n  echo_cancel: maybe\n", `audio.echo_cancel: "maybe" is not one of aec, mute, none`},
		{base + "audio:\n  aec:\n    filter_length: 5s\n", `audio.aec.filter_length: 5s is outside 10ms..1s`},
		{base + "session:\n  barge_in:\n    min_speech: 1ms\n", `session.barge_in.min_speech: 1ms is outside 20ms..5s`},
		{base + "camera:\n  quality: 0.5\n", `camera.quality: "0.5" is not a whole number`},
		{base + "mqtt:\n  broker: tcp://h\n  outbox:\n    max_bytes: lots\n", `mqtt.outbox.max_bytes: "lots" is not a size`},
		{base + "mqtt:\n  broker: tcp://h\n  outbox:\n    max_bytes: 1KB\n", `mqtt.outbox.max_bytes: 1000 is outside 4KiB..1GiB`},
		// Every duration, size and count has a range a person can defend, named by its key.
		{base + "session:\n  backoff_min: 1ns\n", `session.backoff_min: 1ns is outside 500ms..1m`},
		{base + "session:\n  backoff_max: 2h\n", `session.backoff_max: 2h0m0s is outside 1s..1h`},
		{base + "session:\n  max_lag: 100000h\n", `session.max_lag: 100000h0m0s is outside one chunk..30s`},
		{base + "session:\n  reconnect_buffer: 10m\n", `session.reconnect_buffer: 10m0s is outside 0..30s`},
		{base + "session:\n  pre_roll: 1m\n", `session.pre_roll: 1m0s is outside 0..10s`},
		{base + "session:\n  idle_timeout: 1s\n", `session.idle_timeout: 1s is outside 5s..24h`},
		{base + "session:\n  time_limit: 5s\n", `session.time_limit: 5s is outside 0 (by mode) or 30s..24h`},
		{base + "session:\n  time_margin: 10m\n", `session.time_margin: 10m0s is outside 1s..2m`},
		{base + "session:\n  switch_wait: 1h\n", `session.switch_wait: 1h0m0s is outside 1s..2m`},
		{base + "session:\n  listen_grace: 5s\n", `session.listen_grace: 5s is outside 0..2s`},
		{base + "session:\n  context_limit: 1000000000000\n", `session.context_limit: 1000000000000 is outside 512..1048576`},
		{base + "session:\n  context_limit: 1e12\n", `session.context_limit: "1e12" is not a whole number`},
		{base + "session:\n  carry_over_chars: 1000000\n", `session.carry_over_chars: 1000000 is outside 0..20000`},
		{"server:\n  url: ws://gw/v1/realtime\n  max_frame_bytes: 8GiB\n", `server.max_frame_bytes: 8GiB is outside 256KiB..128MiB`},
		{"server:\n  url: ws://gw/v1/realtime\n  ping_interval: 10ms\n", `server.ping_interval: 10ms is outside 1s..1m`},
		{"server:\n  url: ws://gw/v1/realtime\n  dead_link_timeout: 1h\n", `server.dead_link_timeout: 1h0m0s is outside 3s..5m`},
		{"server:\n  url: ws://gw/v1/realtime\n  dial_timeout: 1ms\n", `server.dial_timeout: 1ms is outside 1s..2m`},
		{"server:\n  url: ws://gw/v1/realtime\n  hot_words: [" + strings.Repeat("w, ", 100) + "w]\n", `server.hot_words: 101 words; at most 100`},
		{base + "mqtt:\n  broker: tcp://h\n  outbox:\n    max_bytes: 1000GiB\n", `mqtt.outbox.max_bytes: 1000GiB is outside 4KiB..1GiB`},
		{base + "mqtt:\n  broker: tcp://h\n  connect_timeout: 1h\n", `mqtt.connect_timeout: 1h0m0s is outside 1s..5m`},
		{base + "mqtt:\n  broker: tcp://h\n  max_reconnect_interval: 100ms\n", `mqtt.max_reconnect_interval: 100ms is outside 1s..1h`},
		{base + "mqtt:\n  broker: tcp://h\n  stats_interval: 1000h\n", `mqtt.stats_interval: 1000h0m0s is outside 1s..24h`},
		{base + "audio:\n  input_latency: 1us\n", `audio.input_latency: 1µs is outside 1ms..2s`},
		{base + "audio:\n  output_rest: 100ms\n", `audio.output_rest: 100ms is not 0 (never) or 1s or more`},
		{base + "audio:\n  output_rest: -1s\n", `audio.output_rest: -1s is not 0 (never) or 1s or more`},
		{base + "camera:\n  retry: 1h\n", `camera.retry: 1h0m0s is outside 10ms..1m`},
		{base + "camera:\n  retry_max: 100h\n", `camera.retry_max: 100h0m0s is outside camera.retry..1h`},
		{base + "control:\n  socket: /" + strings.Repeat("d", 120) + "/control.sock\n", `.sock is 134 bytes long; a unix socket path holds at most 107`},
		{base + "server:\n", `server: appears twice`},
		{"server:\n  url: ws://gw/v1/realtime\n  token: ${NOT_SET}\n", `server.token: ${NOT_SET} is not set in the environment`},
		{"server:\n  url: ws://gw/v1/realtime\n  token: a\n  token_file: b\n", `server.token_file: set either token or token_file, not both`},
		{base + "log:\n  level: loud\n", `log.level: "loud" is not one of debug, info, warn, error`},
		{"server: [\n", `not valid YAML`},
	} {
		path := writeConfig(t, tt.yaml, 0o600)
		_, err := loadConfig(path, loadOptions{getenv: envOf(nil)})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %q", tt.yaml, err, tt.want)
		}
	}

	path := writeConfig(t, `server:
  url: ftp://gw
  mode: vidoe
  tokn: x
session:
  chunk: 5
  policy: sometimes
audio:
  volume: 120
camera:
  qualty: 80
`, 0o600)
	code, _, stderr := runCLI(t, "config", "check", "-c", path)
	want := []string{
		`server.tokn: unknown key; did you mean "token"? (line 4)`,
		`session.chunk: 5 has no unit`,
		`camera.qualty: unknown key; did you mean "quality"? (line 11)`,
		`server.url: "ftp://gw": scheme "ftp" is not ws or wss`,
		`server.mode: "vidoe" is not one of video, audio, chat`,
		`session.policy: "sometimes" is not one of always, on_demand, voice`,
		`audio.volume: 120 is outside 0..100`,
	}
	if code != 1 || !strings.Contains(stderr, "7 problem(s)") {
		t.Fatalf("config check: exit %d\n%s", code, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("config check output lacks %q:\n%s", w, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "config", "check", "-c", filepath.Join(t.TempDir(), "none.yaml")); code != 1 || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing file: exit %d %s", code, stderr)
	}
	if code, _, _ := runCLI(t, "config", "frob"); code != exitUsage {
		t.Errorf("config frob: exit %d", code)
	}
}

// Secrets come from the environment or from files; a secret written into a file every user can
// read is warned about.
func TestConfigSecrets(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("file-token\n"), 0o600)
	passFile := filepath.Join(dir, "mqtt-pass")
	os.WriteFile(passFile, []byte("file-pass\n"), 0o600)
	env := envOf(map[string]string{"TOKEN": "env-token", "PASS": "env-pass", "HOST": "broker.lan"})

	path := writeConfig(t, "server:\n  url: ws://gw/v1/realtime\n  token: ${TOKEN}\nmqtt:\n  broker: tcp://${HOST}:1883\n  password: ${PASS}\n", 0o644)
	c, err := loadConfig(path, loadOptions{getenv: env})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Token != "env-token" || c.MQTT.Password != "env-pass" || c.MQTT.Broker != "tcp://broker.lan:1883" || len(c.warnings) != 0 {
		t.Fatalf("from the environment: token %q password %q broker %q warnings %q", c.Server.Token, c.MQTT.Password, c.MQTT.Broker, c.warnings)
	}

	path = writeConfig(t, "server:\n  url: ws://gw/v1/realtime\n  token_file: "+tokenFile+"\nmqtt:\n  broker: tcp://h:1883\n  password_file: "+passFile+"\n", 0o644)
	c, err = loadConfig(path, loadOptions{getenv: env})
	if err != nil {
		t.Fatal(err)
	}
	if token, err := readSecret(c.Server.Token, c.Server.TokenFile); err != nil || token != "file-token" || len(c.warnings) != 0 {
		t.Fatalf("token_file: %q %v, warnings %q", token, err, c.warnings)
	}
	if c.MQTT.PasswordFile != passFile {
		t.Fatalf("password_file %q", c.MQTT.PasswordFile)
	}

	literal := "server:\n  url: ws://gw/v1/realtime\n  token: s3cret\nmqtt:\n  broker: tcp://h:1883\n  password: hunter2\n" +
		"audio:\n  input: file:" + absPath(t, "../../configs/demo/hello.wav") + "\n  output: none\nstate_dir: " + dir + "\n"
	c, err = loadConfig(writeConfig(t, literal, 0o644), loadOptions{getenv: env})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.warnings) != 1 || !strings.Contains(c.warnings[0], "server.token, mqtt.password") || !strings.Contains(c.warnings[0], "mode 0644") {
		t.Fatalf("warnings %q", c.warnings)
	}
	code, _, stderr := runCLI(t, "config", "check", "-c", writeConfig(t, literal, 0o644))
	if code != exitOK || !strings.Contains(stderr, "warning: ") || strings.Contains(stderr, "s3cret") {
		t.Fatalf("config check: exit %d %s", code, stderr)
	}
	c, err = loadConfig(writeConfig(t, literal, 0o640), loadOptions{getenv: env})
	if err != nil || len(c.warnings) != 0 {
		t.Fatalf("mode 0640: %v %q", err, c.warnings)
	}
	// ${VAR:-default}, and $${ for a literal.
	c, err = loadConfig(writeConfig(t, "server:\n  url: ${URL:-ws://fallback/v1/realtime}\n  instructions: costs $${PRICE}\n", 0o600), loadOptions{getenv: env})
	if err != nil || c.Server.URL != "ws://fallback/v1/realtime" || c.Server.Instructions != "costs ${PRICE}" {
		t.Fatalf("fallback: %v %q %q", err, c.Server.URL, c.Server.Instructions)
	}
	if !slices.Contains(yamlconf.Keys(reflect.TypeOf(fileConfig{})), "server.token_file") {
		t.Fatal("server.token_file is not a key")
	}
}

// Which keys change live and which sections restart something.
func TestPlanReload(t *testing.T) {
	base := "server:\n  url: ws://gw/v1/realtime\nmqtt:\n  broker: tcp://h:1883\n"
	load := func(extra string) *fileConfig {
		t.Helper()
		c, err := loadConfig(writeConfig(t, base+extra, 0o600), loadOptions{getenv: envOf(nil)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := load("")
	for _, tt := range []struct{ extra, live, restart string }{
		{"", "", ""},
		{"audio:\n  volume: 30\n", "audio.volume", ""},
		{"log:\n  level: debug\n", "log.level", ""},
		{"log:\n  format: json\n", "log.format", ""},
		{"mqtt:\n  stats_interval: 5s\n", "mqtt.stats_interval", ""},
		{"mqtt:\n  prefix: x/y\n", "", "mqtt"},
		{"session:\n  chunk: 500ms\n", "", "session"},
		{"audio:\n  gain_db: 6\n", "", "audio"},
		{"camera:\n  quality: 50\n", "", "camera"},
		{"device_id: other\n", "", "device_id, mqtt"},
	} {
		text := base + tt.extra
		if strings.HasPrefix(tt.extra, "mqtt:") {
			text = strings.Replace(base, "mqtt:\n", tt.extra, 1)
		}
		c, err := loadConfig(writeConfig(t, text, 0o600), loadOptions{getenv: envOf(nil)})
		if err != nil {
			t.Fatal(err)
		}
		p := planReload(old, c)
		if strings.Join(p.live, ", ") != tt.live || strings.Join(p.restart, ", ") != tt.restart {
			t.Errorf("%q: %+v", tt.extra, p)
		}
	}
	instr := load("")
	instr.Server.Instructions = "new"
	if p := planReload(old, instr); strings.Join(p.live, ",") != "server.instructions" || len(p.restart) > 0 {
		t.Errorf("instructions: %+v", p)
	}
}

// The whole loader (decode, defaults, checks) never panics on a file, whatever it holds, every
// problem it reports says something, and what it accepts is within every range.
func FuzzConfig(f *testing.F) {
	example, err := os.ReadFile(exampleFile)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	f.Add(regexp.MustCompile(`(?m)^(\s*)#([a-z_]+:)`).ReplaceAllString(string(example), "$1$2"))
	f.Add("server:\n  url: ws://gw/v1/realtime\naudio:\n  input: auto\ncamera:\n  source: dir:\nmqtt:\n  broker: ssl://h\n")
	f.Add("server:\n  url: ws://gw/v1/realtime\n  max_frame_bytes: 8GiB\nsession:\n  backoff_min: 1ns\n  max_lag: 100000h\n  context_limit: 1000000000000\n")
	f.Add("server:\n  url: ws://gw/v1/realtime\n  config:\n    a: &a [x, x, x, x]\n    b: &b [*a, *a, *a, *a]\n    c: [*b, *b, *b, *b]\n")
	f.Add("server:\n  url: ${URL:-ws://gw/v1/realtime}\nmqtt:\n  broker: tcp://h\n  outbox:\n    max_bytes: 1000GiB\n  stats_interval: -1s\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := parseConfig([]byte(text), "/etc/omnisat/omnisat.yaml", loadOptions{getenv: envOf(map[string]string{"OMNISAT_TOKEN": "t"})})
		for _, p := range yamlconf.Problems(err) {
			if p.Error() == "" {
				t.Fatal("a problem without a message")
			}
		}
		if err == nil {
			if err := c.validate(); err != nil {
				t.Fatalf("accepted, yet invalid: %v", err)
			}
			if c.Session.BackoffMin < 500*time.Millisecond || c.Session.MaxLag > 30*time.Second || c.Server.Config().MaxFrameBytes > 128<<20 ||
				c.MQTT.Outbox.MaxBytes > 1<<30 || c.Session.ContextLimit > 1<<20 {
				t.Fatalf("accepted a value out of range: %+v", c)
			}
		}
	})
}

// The loader reads only a regular file of a bounded size, and refuses the rest at once: a
// FIFO would block its open, /dev/zero never ends, a 2 MB file is no configuration, and an
// alias bomb would expand to gigabytes.
func TestConfigInputBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	text := "server:\n  url: ws://gw/v1/realtime\n  instructions: |\n" + strings.Repeat("    "+strings.Repeat("x", 100)+"\n", 20_000)
	os.WriteFile(big, []byte(text), 0o600)
	bomb := "server:\n  url: ws://gw/v1/realtime\n  config:\n    a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 10; i++ {
		bomb += fmt.Sprintf("    a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	bombPath := writeConfig(t, bomb, 0o600)
	for _, tt := range []struct{ path, want string }{
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", "is a character device, not a regular file"},
		{dir, "is a folder, not a regular file"},
		{big, fmt.Sprintf("is %d bytes; at most 1MiB is read", len(text))},
		{bombPath, "expands to more than"},
	} {
		for _, args := range [][]string{{"config", "check", "-c", tt.path}, {"run", "-c", tt.path, "--state-dir", dir}} {
			got := make(chan string, 1)
			go func() { _, _, stderr := runCLI(t, args...); got <- stderr }()
			select {
			case stderr := <-got:
				if !strings.Contains(stderr, tt.want) {
					t.Errorf("%v: %q, want %q", args, stderr, tt.want)
				}
			case <-time.After(20 * time.Second): // a hang detector, not a timing assertion
				t.Fatalf("%v did not return", args)
			}
		}
	}
}

// --state-dir is a command-line path: relative to the working directory, as a shell user
// expects. Relative paths inside the file stay relative to the file's folder.
func TestStateDirFlagIsRelativeToTheWorkingDirectory(t *testing.T) {
	path := writeConfig(t, "server:\n  url: ws://gw/v1/realtime\n  token_file: token\nstate_dir: state\n", 0o600)
	os.WriteFile(filepath.Join(filepath.Dir(path), "token"), []byte("t"), 0o600)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(path, loadOptions{getenv: envOf(nil)})
	if err != nil || c.StateDir != filepath.Join(filepath.Dir(path), "state") {
		t.Fatalf("state_dir from the file: %v %q", err, c.StateDir)
	}
	c, err = loadConfig(path, loadOptions{stateDir: "run/state", getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != filepath.Join(wd, "run/state") || c.socketPath() != filepath.Join(wd, "run/state/control.sock") ||
		c.Server.TokenFile != filepath.Join(filepath.Dir(path), "token") {
		t.Fatalf("--state-dir run/state: state_dir %q, socket %q, token_file %q", c.StateDir, c.socketPath(), c.Server.TokenFile)
	}
}

// `config check` opens what the file names, without starting anything, and fails where `run`
// would: each problem with its key path, exit 1 (and run refuses to start, exit 3).
func TestConfigCheckOpensWhatItNames(t *testing.T) {
	dir := t.TempDir()
	notWAV := filepath.Join(dir, "notes.txt")
	os.WriteFile(notWAV, []byte("not a WAV file"), 0o600)
	aFile := filepath.Join(dir, "a-file")
	os.WriteFile(aFile, nil, 0o600)
	// A WAV file whose rate nothing resamples to 16 kHz: the check finds it without decoding.
	oneHz := filepath.Join(dir, "one-hz.wav")
	if err := wav.WriteFile(oneHz, wav.Audio{Rate: 1, Channels: 1, Samples: make([]float32, 4)}); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFrames := t.TempDir()
	// A camera source needs the camera program (here a stand-in: only its presence is checked).
	cameraProgram := filepath.Join(dir, "omnisat-camera")
	os.WriteFile(cameraProgram, []byte("#!/bin/sh\n"), 0o755)
	t.Setenv("OMNISAT_CAMERA_PROGRAM", cameraProgram)
	base := "server:\n  url: ws://gw/v1/realtime\naudio:\n  input: file:../../configs/demo/hello.wav\n  output: none\n"
	base = strings.ReplaceAll(base, "../../configs/demo/hello.wav", absPath(t, "../../configs/demo/hello.wav"))
	for _, tt := range []struct{ yaml, want string }{
		{"server:\n  url: ws://gw/v1/realtime\naudio:\n  input: file:missing.wav\n  output: none\n", "audio.input: open " + filepath.Join(dir, "missing.wav") + ": no such file"},
		{"server:\n  url: ws://gw/v1/realtime\naudio:\n  input: file:" + notWAV + "\n  output: none\n", "audio.input: " + notWAV + ": not a RIFF/WAVE file"},
		{"server:\n  url: ws://gw/v1/realtime\naudio:\n  input: no such microphone anywhere\n  output: none\n", `audio.input: `},
		{strings.Replace(base, "output: none", "output: file:"+filepath.Join(aFile, "out.wav"), 1), "audio.output: " + aFile + " is a file, not a folder"},
		{base + "camera:\n  source: file:" + filepath.Join(dir, "missing.mp4") + "\n", "camera.source: open " + filepath.Join(dir, "missing.mp4") + ": no such file"},
		{base + "camera:\n  source: dir:" + emptyFrames + "\n", "camera.source: open camera folder " + `"` + emptyFrames + `": no .jpg files`},
		{base + "camera:\n  source: /dev/null\n", "camera.source: /dev/null is not a camera (not a video4linux device)"},
		{base + "state_dir: " + aFile + "\n", "state_dir: " + aFile + " is a file, not a folder"},
		{base + "state_dir: /proc/omnisat\n", "state_dir: /proc is not writable"},
		{base + "control:\n  socket: " + aFile + "/control.sock\n", "control.socket: " + aFile + " is a file, not a folder"},
		{strings.Replace(base, "server:\n", "server:\n  token_file: "+fifo+"\n", 1), "server.token_file: " + fifo + " is a named pipe (FIFO)"},
		{base + "state_dir: " + aFile + "/state\n", "state_dir: " + aFile + "/state cannot be made: " + aFile + " is a file"},
		{strings.Replace(base, "server:\n", "server:\n  token_file: missing-token\n", 1), "server.token_file: open " + filepath.Join(dir, "missing-token") + ": no such file"},
		{strings.Replace(base, "server:\n", "server:\n  ref_audio: "+notWAV+"\n", 1), "server.ref_audio: reference voice " + notWAV + ": not a RIFF/WAVE file"},
		{strings.Replace(base, "server:\n", "server:\n  tts_ref_audio: "+oneHz+"\n", 1), "server.tts_ref_audio: reference voice " + oneHz + ": pipeline: cannot resample 1 Hz to 16000 Hz"},
		{base + "mqtt:\n  broker: ssl://h:8883\n  tls:\n    ca_file: missing-ca.pem\n", "mqtt.tls.ca_file: open " + filepath.Join(dir, "missing-ca.pem") + ": no such file"},
		{base + "mqtt:\n  broker: ssl://h:8883\n  tls:\n    ca_file: " + notWAV + "\n", "mqtt.tls.ca_file: \"" + notWAV + "\" holds no PEM certificate"},
		{base + "mqtt:\n  broker: tcp://h:1883\n  password_file: " + fifo + "\n", "mqtt.password_file: " + fifo + " is a named pipe (FIFO)"},
		{base + "mqtt:\n  broker: tcp://h:1883\n  outbox:\n    path: " + aFile + "\n", "mqtt.outbox.path: " + aFile + " is a file, not a folder"},
	} {
		path := filepath.Join(dir, "omnisat.yaml")
		os.WriteFile(path, []byte(tt.yaml), 0o600)
		code, _, stderr := runCLI(t, "config", "check", "-c", path)
		if code != exitFailure || !strings.Contains(stderr, tt.want) {
			t.Errorf("config check of %q: exit %d\n%s\nwant %q", tt.yaml, code, stderr, tt.want)
		}
		code, _, stderr = runCLI(t, "run", "-c", path)
		if code != exitConfig || !strings.Contains(stderr, tt.want) {
			t.Errorf("run with %q: exit %d\n%s\nwant %q", tt.yaml, code, stderr, tt.want)
		}
	}
	// A camera without its program: check and run say so.
	t.Setenv("OMNISAT_CAMERA_PROGRAM", filepath.Join(dir, "no-camera-program"))
	path := filepath.Join(dir, "omnisat.yaml")
	os.WriteFile(path, []byte(base+"camera:\n  source: /dev/video97\n"), 0o600)
	for _, cmd := range [][]string{{"config", "check", "-c", path}, {"run", "-c", path}} {
		if code, _, stderr := runCLI(t, cmd...); code == exitOK || !strings.Contains(stderr, "camera.source: the camera program OMNISAT_CAMERA_PROGRAM=") {
			t.Errorf("%s without the camera program: exit %d\n%s", cmd[0], code, stderr)
		}
	}
	t.Setenv("OMNISAT_CAMERA_PROGRAM", cameraProgram)
	// --file-only checks the file alone (a build host has none of the satellite's devices).
	os.WriteFile(path, []byte("server:\n  url: ws://gw/v1/realtime\naudio:\n  input: file:missing.wav\n  output: hw:9\nstate_dir: "+aFile+"\n"), 0o600)
	if code, out, stderr := runCLI(t, "config", "check", "--file-only", "-c", path); code != exitOK || !strings.Contains(out, ": ok (") {
		t.Errorf("config check --file-only: exit %d\n%s%s", code, out, stderr)
	}
	// A V4L2 camera that is not plugged in yet: run waits for it, so check only warns.
	os.WriteFile(path, []byte(base+"camera:\n  source: /dev/video97\nstate_dir: "+dir+"\n"), 0o600)
	if code, out, stderr := runCLI(t, "config", "check", "-c", path); code != exitOK ||
		!strings.Contains(stderr, "warning: camera.source: /dev/video97 does not exist now; run waits for the camera to be plugged in") {
		t.Errorf("camera not plugged in: exit %d\n%s%s", code, out, stderr)
	}
}

// A file microphone without input_latency hands over one chunk at a time (OpenVoice's small
// frames in a device's 100 ms blocks), and mute is judged within that block; with input_latency
// it delivers blocks of that, as does every device; a device keeps the echo canceller's wait on
// top.
func TestFileMicrophoneBlock(t *testing.T) {
	for _, tt := range []struct {
		name, text  string
		block, hold time.Duration
	}{
		{"file, chunk", "audio:\n  input: file:x.wav\nsession:\n  chunk: 750ms\n", 750 * time.Millisecond, 750 * time.Millisecond},
		{"file, openvoice frames", "  dialect: openvoice\n  model: whisper\naudio:\n  input: file:x.wav\n", 100 * time.Millisecond, 100 * time.Millisecond},
		{"file, input_latency", "audio:\n  input: file:x.wav\n  input_latency: 100ms\n", 100 * time.Millisecond, 100 * time.Millisecond},
		{"device", "audio:\n  input: default\n", 100 * time.Millisecond, 600 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text := "server:\n  url: ws://gw/v1/realtime\n" + tt.text
			c, err := parseConfig([]byte(text), "/etc/omnisat/omnisat.yaml", loadOptions{getenv: envOf(nil)})
			if err != nil {
				t.Fatal(err)
			}
			sc, err := systemConfig(c, &cliEnv{getenv: envOf(nil)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := sc.Audio.Key.(devices.AudioConfig).InputLatency; got != tt.block {
				t.Errorf("block %v, want %v", got, tt.block)
			}
			if got := sc.Agent.AudioHold; got != tt.hold {
				t.Errorf("audio hold %v, want %v", got, tt.hold)
			}
		})
	}
}
