//go:build !linux

package quiettimer

import (
	"sync/atomic"
	"time"
)

type impl struct {
	timer  *time.Timer
	fired  atomic.Int64
	closed atomic.Bool
}

func (t *impl) start() <-chan struct{} {
	c := make(chan struct{}, 1)
	t.timer = time.AfterFunc(time.Hour, func() {
		t.fired.Add(1)
		select {
		case c <- struct{}{}:
		default:
		}
	})
	t.timer.Stop()
	return c
}

func (t *impl) reset(d time.Duration) {
	if !t.closed.Load() { // a Reset after Close does nothing
		t.timer.Reset(d)
	}
}

func (t *impl) stop() { t.timer.Stop() }

func (t *impl) close() {
	t.closed.Store(true)
	t.timer.Stop()
}

func (t *impl) fires() int64 { return t.fired.Load() }
