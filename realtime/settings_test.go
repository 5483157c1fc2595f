package realtime

import (
	"strings"
	"testing"
	"time"
)

func TestSettingsPhaseDeadlines(t *testing.T) {
	base := Settings{URL: "ws://h/v1/realtime"}
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c := base.Config(); c.InitTimeout != 20*time.Second || c.CloseTimeout != 2*time.Second {
		t.Fatalf("defaults: init %v close %v", c.InitTimeout, c.CloseTimeout)
	}
	for _, tt := range []struct {
		init, close time.Duration
		want        string
	}{
		{init: time.Second, close: 100 * time.Millisecond},
		{init: 5 * time.Minute, close: time.Minute},
		{init: 999 * time.Millisecond, want: "server.init_timeout: 999ms is outside 1s..5m0s"},
		{init: time.Hour, want: "server.init_timeout: 1h0m0s is outside"},
		{init: -time.Second, want: "server.init_timeout: -1s is negative"},
		{close: time.Millisecond, want: "server.close_timeout: 1ms is outside 100ms..1m0s"},
		{close: 2 * time.Minute, want: "server.close_timeout: 2m0s is outside"},
	} {
		s := base
		s.InitTimeout, s.CloseTimeout = tt.init, tt.close
		err := s.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || strings.Count(err.Error(), "\n") > 0) {
			t.Errorf("init %v close %v: %v, want %q", tt.init, tt.close, err, tt.want)
		}
		if tt.want == "" && (s.Config().InitTimeout != tt.init || s.Config().CloseTimeout != tt.close) {
			t.Errorf("init %v close %v not passed on: %+v", tt.init, tt.close, s.Config())
		}
	}
}
