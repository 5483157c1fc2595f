package main

import (
	"strings"
	"testing"
)

// A reload switches the format and level of every logger at once, including those a part
// derived before (With), so that no part has to be rebuilt for it.
func TestLogOutputFollowsAReload(t *testing.T) {
	var buf syncBuffer
	out := newLogOutput(&buf, logConfig{Level: "info", Format: "text"}, false)
	agentLog := out.logger().With("component", "agent").WithGroup("session")
	agentLog.Info("first", "id", "a")
	agentLog.Debug("hidden")
	out.set(logConfig{Level: "debug", Format: "json"})
	agentLog.Debug("second", "id", "b")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `msg=first component=agent session.id=a`) ||
		!strings.Contains(lines[1], `"msg":"second","component":"agent","session":{"id":"b"}`) {
		t.Fatalf("lines:\n%s", buf.String())
	}
}
