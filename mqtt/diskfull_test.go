package mqtt_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/internal/yamlconf"
)

// tinyFS mounts a 32 KiB tmpfs for the test (root only): a filesystem that fills up.
func tinyFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a tmpfs (needs root): %v %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// A full disk (ENOSPC) under the outbox: the transcript the outbox cannot keep is not lost in
// silence. It is counted (stats outbox_write_errors), announced (event outbox_write_failed) and,
// the broker being there, still delivered.
func TestOutboxDiskFull(t *testing.T) {
	fs := tinyFS(t)
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	fa := newFakeAgent()
	cfg := testConfig(t, br.URL())
	cfg.Outbox.Path = filepath.Join(fs, "outbox")
	cfg.Outbox.MaxBytes = yamlconf.Size(1 << 20) // the disk fills before the bound drops anything
	cfg.StatsInterval = time.Second
	startBridge(t, cfg, "k", fa)
	p := "omnisat/k/"
	w.waitFor(p+"availability", wait, payloadIs("online"))

	// Fill the disk beside the outbox, then speak.
	filler, _ := os.Create(filepath.Join(fs, "filler"))
	for {
		if _, err := filler.Write(make([]byte, 1024)); err != nil {
			break
		}
	}
	filler.Close()
	text := strings.Repeat("lost? ", 1000)
	fa.emit(agent.Utterance{Role: "user", Text: text, SessionID: "sess-1", End: time.Now()})

	ev := w.waitFor(p+"event", wait, jsonField(t, "kind", "outbox_write_failed")).json(t)
	if r, _ := ev["reason"].(string); !strings.Contains(r, "no space left") || !strings.Contains(r, "sent directly") {
		t.Errorf("event %v: want the cause and what became of the message", ev)
	}
	tr := w.waitFor(p+"transcript", wait, nil).json(t)
	if tr["text"] != text {
		t.Errorf("the transcript did not arrive: %v", tr)
	}
	w.waitFor(p+"stats", 5*time.Second, func(m msg) bool { return strings.Contains(m.Payload, `"outbox_write_errors":1`) })
}
