//go:build !linux

package devices

import (
	"context"
	"time"
)

// alarm is what a PacedSource sleeps on until its next block is due: a runtime timer.
type alarm struct{}

func newAlarm() alarm { return alarm{} }

// wait sleeps for d or until ctx ends (ctx.Err()).
func (a *alarm) wait(ctx context.Context, d time.Duration) error { return Sleep(ctx, d) }
