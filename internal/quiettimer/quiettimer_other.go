//go:build !linux

package quiettimer

import "time"

type impl struct{ rt *runtimeTimer }

func (t *impl) start(fire func())     { t.rt = newRuntimeTimer(fire) }
func (t *impl) reset(d time.Duration) { t.rt.reset(d) }
func (t *impl) stop()                 { t.rt.stop() }
func (t *impl) close()                { t.rt.close() }
func (t *impl) earlyWakes() int64     { return 0 }
