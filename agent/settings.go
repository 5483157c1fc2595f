package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// Defaults are the configuration's values of the settings commands can change.
type Defaults struct {
	Muted        bool
	CameraOn     bool
	Volume       int
	Instructions string
}

// override is one setting changed by a command, with the configuration's value it replaced: when
// the configuration's value has changed since (the owner edited the file after the command), the
// newer decision wins and the override is dropped.
type override[T comparable] struct {
	Value   T `json:"value"`
	Default T `json:"default"`
}

// storedSettings is the file's content.
type storedSettings struct {
	Muted        *override[bool]   `json:"muted,omitempty"`
	CameraOn     *override[bool]   `json:"camera_on,omitempty"`
	Volume       *override[int]    `json:"volume,omitempty"`
	Instructions *override[string] `json:"instructions,omitempty"`
	// Held is a stop command that holds the session off (policy always) until start.
	Held bool `json:"held,omitempty"`
}

// maxSettingsBytes bounds the file (instructions are the longest part).
const maxSettingsBytes = 1 << 20

// settingsStore keeps the runtime overrides in a file so that they survive restarts. Writes are
// atomic (temporary file, fsync, rename, fsync of the folder): after a power cut the file holds
// the old or the new settings, never a mix. A file that cannot be read or decoded is ignored
// with a warning: the configuration applies. An empty path keeps the overrides in memory only.
type settingsStore struct {
	path string
	log  *slog.Logger

	mu  sync.Mutex
	cur storedSettings
}

// openSettings loads the overrides at path and drops those whose configuration value changed.
func openSettings(path string, d Defaults, log *slog.Logger) *settingsStore {
	st := &settingsStore{path: path, log: log}
	if path == "" {
		return st
	}
	b, err := readBounded(path, maxSettingsBytes)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st
	case err != nil:
		log.Warn("agent: settings not restored; the configuration applies", "file", path, "err", err)
		return st
	}
	var cur storedSettings
	if err := json.Unmarshal(b, &cur); err != nil {
		log.Warn("agent: settings file is corrupt; the configuration applies", "file", path, "err", err)
		return st
	}
	if cur.Volume != nil && (cur.Volume.Value < 0 || cur.Volume.Value > 100) {
		log.Warn("agent: stored volume out of range; the configuration applies", "file", path, "volume", cur.Volume.Value)
		cur.Volume = nil
	}
	st.cur = cur
	if dropped := st.cur.dropStale(d); len(dropped) > 0 {
		log.Info("agent: the configuration changed since these settings were set by command; it applies", "settings", dropped)
		st.saveLocked()
	}
	return st
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%d bytes is larger than %d", fi.Size(), limit)
	}
	b := make([]byte, fi.Size())
	_, err = f.ReadAt(b, 0)
	if err != nil && fi.Size() > 0 {
		return nil, err
	}
	return b, nil
}

// dropStale removes overrides whose recorded default is not today's; it returns their names.
func (c *storedSettings) dropStale(d Defaults) []string {
	var dropped []string
	if o := c.Muted; o != nil && o.Default != d.Muted {
		c.Muted, dropped = nil, append(dropped, "mute")
	}
	if o := c.CameraOn; o != nil && o.Default != d.CameraOn {
		c.CameraOn, dropped = nil, append(dropped, "camera")
	}
	if o := c.Volume; o != nil && o.Default != d.Volume {
		c.Volume, dropped = nil, append(dropped, "volume")
	}
	if o := c.Instructions; o != nil && o.Default != d.Instructions {
		c.Instructions, dropped = nil, append(dropped, "instructions")
	}
	return dropped
}

// snapshot returns a copy of the stored overrides.
func (st *settingsStore) snapshot() storedSettings {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cur
}

// names lists the overrides in effect, for the status.
func (st *settingsStore) names() []string {
	c := st.snapshot()
	var n []string
	if c.Muted != nil {
		n = append(n, "mute")
	}
	if c.CameraOn != nil {
		n = append(n, "camera")
	}
	if c.Volume != nil {
		n = append(n, "volume")
	}
	if c.Instructions != nil {
		n = append(n, "instructions")
	}
	if c.Held {
		n = append(n, "session")
	}
	return n
}

// update edits the overrides and saves them.
func (st *settingsStore) update(f func(*storedSettings)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	before := st.cur
	f(&st.cur)
	if before == st.cur {
		return
	}
	st.saveLocked()
}

// saveLocked writes the file atomically; a failure is logged (the setting still applies now).
func (st *settingsStore) saveLocked() {
	if st.path == "" {
		return
	}
	b, err := json.MarshalIndent(st.cur, "", "  ")
	if err == nil {
		err = writeFileAtomic(st.path, append(b, '\n'))
	}
	if err != nil {
		st.log.Error("agent: settings not saved; they apply until the next restart", "file", st.path, "err", err)
	}
}

// writeFileAtomic replaces path with data so that a crash or power cut leaves either the old or
// the new content: temporary file, fsync, rename, fsync of the folder.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o640)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// setOverride records v as the setting's value, or clears the override when v is the default.
func setOverride[T comparable](o **override[T], v, def T) {
	if v == def {
		*o = nil
		return
	}
	*o = &override[T]{Value: v, Default: def}
}
