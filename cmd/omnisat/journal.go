package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// isJournal tells whether f (stderr) is the journal stream systemd named in JOURNAL_STREAM
// ("device:inode"). Comparing the two, as systemd advises, keeps a child whose stderr was
// redirected elsewhere from writing journal-style lines into a file.
func isJournal(f *os.File, journalStream string) bool {
	dev, ino, ok := strings.Cut(journalStream, ":")
	if !ok {
		return false
	}
	wantDev, err1 := strconv.ParseUint(dev, 10, 64)
	wantIno, err2 := strconv.ParseUint(ino, 10, 64)
	var st syscall.Stat_t
	if err1 != nil || err2 != nil || syscall.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	return uint64(st.Dev) == wantDev && uint64(st.Ino) == wantIno
}

// dropTime removes the record's time: the journal stamps every line itself.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// journalOut puts a syslog priority prefix ("<4>") before each line a handler writes. slog's
// text and JSON handlers write a record in one call, so the prefix is set per record under mu.
type journalOut struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (o *journalOut) Write(line []byte) (int, error) {
	if _, err := io.WriteString(o.w, o.prefix+string(line)); err != nil {
		return 0, err
	}
	return len(line), nil
}

// journalHandler sets journalOut's prefix from each record's level.
type journalHandler struct {
	inner slog.Handler
	out   *journalOut
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.prefix = syslogPriority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &journalHandler{inner: h.inner.WithAttrs(attrs), out: h.out}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{inner: h.inner.WithGroup(name), out: h.out}
}

// syslogPriority is sd-daemon's prefix for a level: err, warning, info, debug.
func syslogPriority(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "<3>"
	case l >= slog.LevelWarn:
		return "<4>"
	case l >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
}
