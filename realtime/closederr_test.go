package realtime

import (
	"errors"
	"strings"
	"testing"
)

// A Send or Ask that finds the session ended says why, also in the moment between endClosed
// marking it ended and closing done (once, `omnisat chat` against a gateway that closed early
// with backend_error printed a bare "session closed").
func TestClosedErrSaysWhyBeforeDone(t *testing.T) {
	s := &session{done: make(chan struct{})}
	if err := s.closedErr(); err != ErrClosed {
		t.Fatalf("live session: %v, want ErrClosed", err)
	}
	s.endErr = &Error{Class: ClassRetryable, Code: CodeSessionClosed, Reason: "backend_error", Message: "the gateway closed the session (backend_error)"}
	s.ended = true // done is not closed yet
	err := s.closedErr()
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "backend_error") {
		t.Fatalf("ended session: %v, want ErrClosed with the reason", err)
	}
}
