package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
)

// logOutput is the process's log: lines to w in a format and at a level that a reload changes
// at once. Every logger made from it, and every logger derived from those (With, WithGroup),
// follows the change, so no part has to be rebuilt for it. In the journal (journal true) each
// line starts with its syslog priority (<3> for errors ...), so journalctl can filter and
// colour by level, and text lines carry no time of their own: the journal stamps each.
type logOutput struct {
	w       io.Writer
	journal bool
	level   slog.LevelVar
	handler atomic.Pointer[slog.Handler] // the current format's handler
}

func newLogOutput(w io.Writer, c logConfig, journal bool) *logOutput {
	o := &logOutput{w: w, journal: journal}
	o.set(c)
	return o
}

// set switches to c's level and format.
func (o *logOutput) set(c logConfig) {
	o.level.Set(logLevel(c.Level))
	opts := &slog.HandlerOptions{Level: &o.level}
	w := o.w
	var out *journalOut
	if o.journal {
		out = &journalOut{w: w}
		w = out
		if c.Format != "json" {
			opts.ReplaceAttr = dropTime
		}
	}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	if out != nil {
		h = &journalHandler{inner: h, out: out}
	}
	o.handler.Store(&h)
}

func (o *logOutput) logger() *slog.Logger { return slog.New(&followHandler{out: o}) }

// followHandler hands each record to the output's current handler, with the attributes and
// groups it was derived with applied in order.
type followHandler struct {
	out     *logOutput
	derive  []func(slog.Handler) slog.Handler
	derived atomic.Pointer[derivedHandler] // for the handler it was made from
}

type derivedHandler struct {
	from *slog.Handler
	h    slog.Handler
}

func (f *followHandler) current() slog.Handler {
	root := f.out.handler.Load()
	if d := f.derived.Load(); d != nil && d.from == root {
		return d.h
	}
	h := *root
	for _, derive := range f.derive {
		h = derive(h)
	}
	f.derived.Store(&derivedHandler{from: root, h: h})
	return h
}

func (f *followHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= f.out.level.Level()
}

func (f *followHandler) Handle(ctx context.Context, r slog.Record) error {
	return f.current().Handle(ctx, r)
}

func (f *followHandler) with(derive func(slog.Handler) slog.Handler) slog.Handler {
	return &followHandler{out: f.out, derive: append(f.derive[:len(f.derive):len(f.derive)], derive)}
}

func (f *followHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return f.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(attrs) })
}

func (f *followHandler) WithGroup(name string) slog.Handler {
	return f.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

func logLevel(name string) slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(name)) // validated: debug, info, warn, error
	return level
}
