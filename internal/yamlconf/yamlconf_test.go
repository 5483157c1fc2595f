package yamlconf

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

type tlsSection struct {
	CAFile string `yaml:"ca_file"`
}

type inlined struct {
	Quality int `yaml:"quality"`
}

type testConfig struct {
	Name   string         `yaml:"name"`
	Port   int            `yaml:"port"`
	Ratio  float64        `yaml:"ratio"`
	On     *bool          `yaml:"on"`
	Chunk  time.Duration  `yaml:"chunk"`
	Max    Size           `yaml:"max"`
	Words  []string       `yaml:"words"`
	Extra  map[string]any `yaml:"extra"`
	TLS    tlsSection     `yaml:"tls"`
	Camera struct {
		inlined `yaml:",inline"`
		Source  string `yaml:"source"`
	} `yaml:"camera"`
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestDecodeGood(t *testing.T) {
	src := `
name: ${NAME}
port: ${PORT}
ratio: 0.5
on: true
chunk: 250ms
max: 5MB
words: [a, "b"]
extra: {anything: [1, 2], token: "${NAME}"}
tls:
  ca_file: "$${literal}"
camera:
  quality: 70
  source: dir:frames
`
	var c testConfig
	if err := Decode([]byte(src), &c, env(map[string]string{"NAME": "kiosk", "PORT": "8080"})); err != nil {
		t.Fatal(err)
	}
	if c.Name != "kiosk" || c.Port != 8080 || c.Ratio != 0.5 || c.On == nil || !*c.On || c.Chunk != 250*time.Millisecond ||
		c.Max != 5_000_000 || !reflect.DeepEqual(c.Words, []string{"a", "b"}) || c.TLS.CAFile != "${literal}" ||
		c.Camera.Quality != 70 || c.Camera.Source != "dir:frames" || c.Extra["token"] != "kiosk" {
		t.Fatalf("decoded %+v", c)
	}
}

// A duration of 0 needs no unit (the documented "0: never" of several settings), also through
// ${VAR}; yaml.v3 alone refuses a number for a time.Duration.
func TestDecodeZeroDuration(t *testing.T) {
	for _, src := range []string{"chunk: 0\n", "chunk: ${ZERO}\n", "chunk: \"0\"\n", "chunk: 0s\n"} {
		c := testConfig{Chunk: 5 * time.Second}
		if err := Decode([]byte(src), &c, env(map[string]string{"ZERO": "0"})); err != nil {
			t.Errorf("%q: %v", src, err)
		} else if c.Chunk != 0 {
			t.Errorf("%q: chunk %v", src, c.Chunk)
		}
	}
}

func TestDecodeEmpty(t *testing.T) {
	for _, src := range []string{"", "\n", "# only a comment\n", "~\n"} {
		var c testConfig
		if err := Decode([]byte(src), &c, nil); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// Every problem is reported, each naming its key path and what is allowed.
func TestDecodeProblems(t *testing.T) {
	src := `
nmae: x
port: eighty
ratio: [1]
on: maybe
chunk: 5
max: lots
words: a
tls:
  ca_fil: x
  ca_file: ${MISSING}
camera:
  quality: high
  sauce: x
port: 2
extra: {fine: "yes"}
`
	var c testConfig
	err := Decode([]byte(src), &c, env(nil))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`nmae: unknown key; did you mean "name"? (line 2)`,
		`port: "eighty" is not a whole number (line 3)`,
		`ratio: is a list; want a number (line 4)`,
		`on: "maybe" is not true or false (line 5)`,
		`chunk: 5 has no unit; write a duration such as 5s or 5ms (line 6)`,
		`max: "lots" is not a size (such as 512KB, 5MB, 4MiB or a number of bytes) (line 7)`,
		`words: is "a"; want a list (line 8)`,
		`tls.ca_fil: unknown key; did you mean "ca_file"? (line 10)`,
		`tls.ca_file: ${MISSING} is not set in the environment (use ${MISSING:-default} for a fallback) (line 11)`,
		`camera.quality: "high" is not a whole number (line 13)`,
		`camera.sauce: unknown key; did you mean "source"? (line 14)`,
		`port: appears twice (line 15)`,
	}
	got := Problems(err)
	var lines []string
	for _, e := range got {
		lines = append(lines, e.Error())
	}
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// What was fine is still decoded, so that it can be checked too.
	if c.Port != 0 || c.Name != "" || c.TLS.CAFile != "" || c.Camera.Source != "" || c.Words != nil {
		t.Fatalf("bad values decoded: %+v", c)
	}
	if c.Extra["fine"] != "yes" {
		t.Fatalf("good values lost: %+v", c)
	}
}

func TestDecodeSyntaxAndShape(t *testing.T) {
	for src, want := range map[string]string{
		"name: [unclosed\n": "not valid YAML",
		"- a\n- b\n":        "(top level): is a list; want a section of keys",
		"tls: 3\n":          "tls: is \"3\"; want a section of keys",
		"zzzzzzzzzz: 1\n":   "zzzzzzzzzz: unknown key; known keys: camera, chunk, extra",
		"name: ${1BAD}\n":   "${1BAD} is not a variable name",
		"name: ${OPEN\n":    "has ${ without a closing }",
		// An alias inside its own anchor is a cycle, which decoding expanded until the
		// process ran out of memory.
		"extra:\n  b: &b [*b, x]\n":              "extra.b[0]: an alias refers to the value that holds it (line 2)",
		"words: &w [*w]\n":                       "words[0]: an alias refers to the value that holds it (line 1)",
		"camera: &c {quality: 3, source: *c}\n":  "camera.source: an alias refers to the value that holds it (line 1)",
		"extra: &e {a: {b: [1, *e]}}\nname: x\n": "extra.a.b[1]: an alias refers to the value that holds it (line 1)",
	} {
		var c testConfig
		err := Decode([]byte(src), &c, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", src, err, want)
		}
	}
}

func TestDecodeNeedsStructPointer(t *testing.T) {
	var c testConfig
	if err := Decode([]byte("a: 1"), c, nil); err == nil {
		t.Fatal("a non-pointer was accepted")
	}
}

func TestExpand(t *testing.T) {
	get := env(map[string]string{"A": "1", "EMPTY": ""})
	for in, want := range map[string]string{
		"x${A}y":          "x1y",
		"${A}${A}":        "11",
		"${EMPTY:-def}":   "def",
		"${UNSET:-a:-b}":  "a:-b",
		"$${A}":           "${A}",
		"plain $A ${A}":   "plain $A 1",
		"price: $5":       "price: $5",
		"${A:-}":          "1",
		"${UNSET:-}-tail": "-tail",
	} {
		got, missing, err := Expand(in, get)
		if err != nil || len(missing) > 0 || got != want {
			t.Errorf("Expand(%q) = %q, %v, %v; want %q", in, got, missing, err, want)
		}
	}
	if _, missing, _ := Expand("${UNSET}${EMPTY}", get); !reflect.DeepEqual(missing, []string{"UNSET", "EMPTY"}) {
		t.Errorf("missing = %v", missing)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{
		"0": 0, "512": 512, "5MB": 5_000_000, "5 mb": 5_000_000, "4MiB": 4 << 20, "1.5KiB": 1536,
		"2G": 2 << 30, "64kB": 64_000, "1gib": 1 << 30, "10b": 10,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MB", "-1MB", "5XB", "1e3", "5 M B", "99999999999GiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	for v, want := range map[Size]string{4 << 20: "4MiB", 1536: "1536", 1 << 30: "1GiB", 3 << 10: "3KiB"} {
		if v.String() != want {
			t.Errorf("%d.String() = %q, want %q", int64(v), v.String(), want)
		}
	}
}

func TestKeys(t *testing.T) {
	got := strings.Join(Keys(reflect.TypeOf(testConfig{})), " ")
	want := "camera camera.quality camera.source chunk extra max name on port ratio tls tls.ca_file words"
	if got != want {
		t.Fatalf("Keys = %s\nwant   %s", got, want)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("name: x\nport: 1\nchunk: 1s\nmax: 5MB\nwords: [a]\ntls: {ca_file: y}\ncamera: {quality: 3}\n")
	f.Add("port: ${PORT:-80}\nextra: {a: &x [1]}\nname: *x\n")
	f.Add("- [\n")
	f.Add("extra:\n  b: &b [*b, x]\nwords: &w [*w]\n")
	f.Fuzz(func(t *testing.T, src string) {
		var c testConfig
		err := Decode([]byte(src), &c, env(map[string]string{"PORT": "8080"}))
		if err != nil && err.Error() == "" {
			t.Fatal("an error without a message")
		}
	})
}

// Only a regular file within the limit is read; anything else is refused without reading (a
// FIFO with no writer would block its open, /dev/zero never ends).
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	os.WriteFile(small, []byte("name: x\n"), 0o600)
	if b, err := ReadFile(small, 100); err != nil || string(b) != "name: x\n" {
		t.Fatalf("regular file: %q %v", b, err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{small + "x", "no such file"},
		{small, "is 8 bytes; at most 4 is read"},
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", "is a character device, not a regular file"},
		{dir, "is a folder, not a regular file"},
	} {
		limit := int64(100)
		if tt.path == small {
			limit = 4
		}
		got := make(chan error, 1)
		go func() { _, err := ReadFile(tt.path, limit); got <- err }()
		select {
		case err := <-got:
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %v, want %q", tt.path, err, tt.want)
			}
		case <-time.After(20 * time.Second): // a hang detector, not a timing assertion
			t.Fatalf("%s: ReadFile did not return", tt.path)
		}
	}
	// /proc files say size 0 and may hold more: the limit holds whatever stat says.
	if _, err := ReadFile("/proc/self/maps", 16); err == nil || !strings.Contains(err.Error(), "holds more than 16") {
		t.Errorf("/proc/self/maps: %v", err)
	}
}
