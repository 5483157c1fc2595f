package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/realtime"
)

// The supervisor against a scripted server: any sequence of session events, ends and dial
// failures (any class, any order, any timing) and commands. Whatever happens, the agent is
// live, or waits for an attempt it has scheduled, or is dialling; it never dials faster than its
// backoff allows; and once the server behaves it comes back by itself.

const (
	fuzzBackoffMin = 5 * time.Millisecond
	fuzzBackoffMax = 40 * time.Millisecond
)

// fakeSession is a session whose events the script writes.
type fakeSession struct {
	id      string
	started time.Time
	events  chan realtime.Event

	mu       sync.Mutex
	ended    bool
	done     chan struct{}
	accepted []uint64
}

func newFakeSession(id string) *fakeSession {
	return &fakeSession{id: id, started: time.Now(), events: make(chan realtime.Event, 1024), done: make(chan struct{})}
}

func (f *fakeSession) Info() realtime.Info { return realtime.Info{ID: f.id} }

func (f *fakeSession) Send(ctx context.Context, c realtime.Chunk) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return realtime.ErrClosed
	}
	f.accepted = append(f.accepted, c.ID)
	return nil
}

func (f *fakeSession) Ask(context.Context, realtime.ChatRequest) error {
	return errors.New("no chat here")
}
func (f *fakeSession) Speak(context.Context, realtime.Speech) (string, error) {
	return "", errors.New("no speech here")
}
func (f *fakeSession) CommitAudio(context.Context) error  { return nil }
func (f *fakeSession) CancelSpeech(context.Context) error { return nil }
func (f *fakeSession) Events() <-chan realtime.Event      { return f.events }
func (f *fakeSession) Done() <-chan struct{}              { return f.done }
func (f *fakeSession) Err() error                         { return nil }

func (f *fakeSession) Stats() realtime.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return realtime.Stats{ChunksDelivered: uint64(len(f.accepted))}
}

// emit delivers an event unless the session is over.
func (f *fakeSession) emit(ev realtime.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		select {
		case f.events <- ev:
		default: // a consumer this far behind is the agent's problem, not the script's
		}
	}
}

// end ends the session with a last Closed event, once.
func (f *fakeSession) end(ev realtime.Closed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	f.ended = true
	f.events <- ev
	close(f.events)
	close(f.done)
}

func (f *fakeSession) Close(_ context.Context, reason string) error {
	f.end(realtime.Closed{Reason: reason})
	return nil
}

// dialRecord is one call of the fake dial.
type dialRecord struct {
	at        time.Time
	abandoned bool // its context ended before it returned
}

type fakeServer struct {
	mu       sync.Mutex
	outcomes []byte // what the next dials do; empty: succeed
	sessions []*fakeSession
	dials    []dialRecord
	inFlight int
	commands []time.Time // when the script gave a start, stop or restart
	n        int
	// endAtOnce: this many of the next sessions opened end as soon as they are created.
	endAtOnce int
}

func (fs *fakeServer) dial(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
	fs.mu.Lock()
	rec := dialRecord{at: time.Now()}
	idx := len(fs.dials)
	fs.dials = append(fs.dials, rec)
	fs.inFlight++
	outcome := byte(0)
	if len(fs.outcomes) > 0 {
		outcome, fs.outcomes = fs.outcomes[0], fs.outcomes[1:]
	}
	fs.n++
	id := fmt.Sprintf("fake-%d", fs.n)
	fs.mu.Unlock()
	defer func() {
		fs.mu.Lock()
		fs.inFlight--
		fs.dials[idx].abandoned = ctx.Err() != nil
		fs.mu.Unlock()
	}()
	switch outcome % 6 {
	case 1:
		return nil, &realtime.Error{Class: realtime.ClassRetryable, Code: "worker_busy", Message: "fake: busy"}
	case 2:
		return nil, &realtime.Error{Class: realtime.ClassConfig, Code: "model_not_found", Message: "fake: unknown model"}
	case 3:
		// Queued until the agent gives up on it (or for a while).
		if cfg.OnQueue != nil {
			cfg.OnQueue(realtime.QueueStatus{Position: 1, Length: 1})
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(outcome) * time.Millisecond / 4):
		}
		if cfg.OnQueue != nil {
			cfg.OnQueue(realtime.QueueStatus{Done: true})
		}
	case 4:
		return nil, &realtime.Error{Class: realtime.ClassRetryable, Code: realtime.CodeInitTimeout, Message: "fake: no session.created"}
	}
	s := newFakeSession(id)
	fs.mu.Lock()
	fs.sessions = append(fs.sessions, s)
	endNow := fs.endAtOnce > 0
	if endNow {
		fs.endAtOnce--
	}
	fs.mu.Unlock()
	if endNow {
		s.end(realtime.Closed{Reason: "timeout", Err: &realtime.Error{Class: realtime.ClassEnded, Code: realtime.CodeSessionClosed, Reason: "timeout", Message: "fake: ended at once"}})
	}
	return s, nil
}

// live returns the newest session not yet ended.
func (fs *fakeServer) live() *fakeSession {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i := len(fs.sessions) - 1; i >= 0; i-- {
		s := fs.sessions[i]
		s.mu.Lock()
		ended := s.ended
		s.mu.Unlock()
		if !ended {
			return s
		}
	}
	return nil
}

func closedWith(b byte, s *fakeSession) realtime.Closed {
	switch b % 6 {
	case 0:
		return realtime.Closed{Reason: "timeout", Err: &realtime.Error{Class: realtime.ClassEnded, Code: realtime.CodeSessionClosed, Reason: "timeout", Message: "fake: timeout"}}
	case 1:
		return realtime.Closed{Reason: "backend_error", Err: &realtime.Error{Class: realtime.ClassRetryable, Code: realtime.CodeSessionClosed, Reason: "backend_error", Message: "fake: backend_error"}}
	case 2:
		return realtime.Closed{Err: &realtime.Error{Class: realtime.ClassConfig, Code: realtime.CodeDialectMismatch, Message: "fake: other dialect"}}
	case 3:
		return realtime.Closed{Reason: "context_full", Err: &realtime.Error{Class: realtime.ClassEnded, Code: realtime.CodeSessionClosed, Reason: "context_full", Message: "fake: context_full"}}
	case 4:
		s.mu.Lock()
		ids := append([]uint64(nil), s.accepted[max(0, len(s.accepted)-3):]...)
		s.mu.Unlock()
		return realtime.Closed{Undelivered: ids, Err: &realtime.Error{Class: realtime.ClassRetryable, Code: realtime.CodeDeadLink, Message: "fake: dead link"}}
	default:
		return realtime.Closed{Err: &realtime.Error{Class: realtime.ClassProtocol, Code: realtime.CodeInvalidJSON, Message: "fake: odd end"}}
	}
}

func FuzzSupervisor(f *testing.F) {
	// Pairs of (operation, argument); see runScript.
	f.Add([]byte{0, 10, 7, 0, 0, 10, 7, 0, 0, 10, 7, 0, 0, 10, 7, 0, 0, 10, 7, 0}) // a server that ends every session at once
	f.Add([]byte{8, 1, 8, 2, 8, 1, 0, 20, 0, 24, 0, 24, 7, 4, 0, 15})              // refusals, a config error, a lost link
	f.Add([]byte{0, 10, 3, 0, 2, 3, 5, 80, 1, 0, 9, 0, 0, 5, 9, 1, 0, 5})          // a reply, kv, a restart, a stop
	f.Add([]byte{8, 3, 8, 35, 0, 20, 5, 255, 0, 20, 7, 3, 0, 20, 9, 4, 7, 2})      // queued dials, a full context, a lost link
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 48 {
			script = script[:48]
		}
		runScript(t, script)
	})
}

func runScript(t *testing.T, script []byte) {
	fs := &fakeServer{}
	audio := make([]float32, 16000)
	sup, err := agent.NewUnchecked(agent.Options{
		Config: agent.Config{Chunk: 250 * time.Millisecond, BackoffMin: fuzzBackoffMin, BackoffMax: fuzzBackoffMax,
			ConfigErrorRetry: 60 * time.Millisecond, TimeLimit: 150 * time.Millisecond, TimeMargin: 50 * time.Millisecond,
			ContextLimit: 1024, ContextMargin: 200, SwitchWait: 30 * time.Millisecond},
		Server: realtime.Config{URL: "ws://fake/v1/realtime", Mode: realtime.ModeAudio, CloseTimeout: 50 * time.Millisecond},
		Audio:  &periodSource{samples: audio, period: 1600}, Speaker: &clockSpeaker{}, Dial: fs.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	events, _ := sup.Subscribe(1 << 16)
	var mu sync.Mutex
	var states []seenStatus
	go func() {
		for ev := range events {
			if sc, ok := ev.(agent.StateChanged); ok {
				mu.Lock()
				states = append(states, seenStatus{sc.Status, time.Now()})
				mu.Unlock()
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10 s of cancel")
		}
	}()
	command := func(f func()) {
		fs.mu.Lock()
		fs.commands = append(fs.commands, time.Now())
		fs.mu.Unlock()
		f()
	}
	stopped := false
	for i := 0; i+1 < len(script); i += 2 {
		op, arg := script[i], script[i+1]
		s := fs.live()
		switch op % 10 {
		case 0:
			time.Sleep(time.Duration(arg%25) * time.Millisecond)
		case 1:
			if s != nil {
				s.emit(realtime.Listen{})
			}
		case 2:
			if s != nil {
				s.emit(realtime.AudioDelta{Samples: make([]float32, 2400*int(arg%5+1)), SampleRate: 24000})
			}
		case 3:
			if s != nil {
				s.emit(realtime.TextDelta{Text: "word "})
			}
		case 4:
			if s != nil {
				s.emit(realtime.TurnDone{})
			}
		case 5:
			if s != nil {
				s.emit(realtime.MetricsUpdate{Metrics: realtime.Metrics{KVCacheLength: int(arg) * 5, WallClockMS: 400}})
			}
		case 6:
			if s != nil {
				s.emit(realtime.ErrorEvent{Err: &realtime.Error{Class: realtime.ClassProtocol, Code: realtime.CodeBadField, Message: "fake: bad frame"}})
			}
		case 7:
			if s != nil {
				s.end(closedWith(arg, s))
			}
		case 8:
			fs.mu.Lock()
			fs.outcomes = append(fs.outcomes, arg)
			fs.mu.Unlock()
		case 9:
			switch arg % 5 {
			case 0:
				command(sup.Restart)
				stopped = false
			case 1:
				command(sup.Stop)
				stopped = true
			case 2:
				command(sup.Start)
				stopped = false
			case 3:
				sup.Interrupt()
			case 4:
				sup.Mute(arg%2 == 0)
			}
		}
	}
	// The server behaves from now on.
	fs.mu.Lock()
	fs.outcomes = nil
	fs.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	checkSettled(t, sup, fs, stopped)
	if stopped {
		command(sup.Start)
	}
	// It comes back by itself: the longest wait it may have scheduled is config_error_retry.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := sup.Status()
		if st.State == agent.StateListening || st.State == agent.StateSpeaking {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not live 5 s after the server behaved: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	checkDialSpacing(t, fs.dials, fs.commands)
	checkAnnouncedAttempts(t, states, fs.dials, fs.commands)
}

// checkSettled: a moment after the script, the agent is live, waiting for an attempt it has
// scheduled, dialling, or stopped by command.
func checkSettled(t *testing.T, sup *agent.Supervisor, fs *fakeServer, stopped bool) {
	t.Helper()
	st := sup.Status()
	fs.mu.Lock()
	inFlight := fs.inFlight
	fs.mu.Unlock()
	switch st.State {
	case agent.StateListening, agent.StateSpeaking:
	case agent.StateReconnecting, agent.StateError:
		if st.NextAttempt.IsZero() {
			t.Fatalf("state %s with no next attempt: %+v", st.State, st)
		}
	case agent.StateConnecting, agent.StateQueued, agent.StateStarting:
		if inFlight == 0 {
			// A dial may just have returned; give the loop a moment to take the result.
			time.Sleep(50 * time.Millisecond)
			if st2 := sup.Status(); st2.State == st.State && st2.Since.Equal(st.Since) {
				t.Fatalf("state %s with no dial under way: %+v", st.State, st)
			}
		}
	case agent.StateIdle:
		if !stopped {
			t.Fatalf("idle although no stop was given (policy always): %+v", st)
		}
	default:
		t.Fatalf("unexpected state %+v", st)
	}
}

// commanded says whether a person may have asked for a dial at at (a start, stop or restart
// given since shortly before the previous dial).
func commanded(commands []time.Time, prev, at time.Time) bool {
	for _, c := range commands {
		if !c.After(at) && c.After(prev.Add(-20*time.Millisecond)) {
			return true
		}
	}
	return false
}

// checkDialSpacing: every dial comes at least backoff_min after the one before, unless a person
// asked for it (a command) or the one before was abandoned in the server's queue (a rollover
// that turned sequential).
func checkDialSpacing(t *testing.T, dials []dialRecord, commands []time.Time) {
	t.Helper()
	for i := 1; i < len(dials); i++ {
		if dials[i-1].abandoned || commanded(commands, dials[i-1].at, dials[i].at) {
			continue
		}
		if gap := dials[i].at.Sub(dials[i-1].at); gap < fuzzBackoffMin-time.Millisecond {
			t.Fatalf("dial %d came %v after dial %d: faster than backoff_min %v", i, gap, i-1, fuzzBackoffMin)
		}
	}
}

// seenStatus is a published status and when the test saw it.
type seenStatus struct {
	agent.Status
	seen time.Time
}

// checkAnnouncedAttempts: after a published next attempt, no dial comes before that time.
func checkAnnouncedAttempts(t *testing.T, states []seenStatus, dials []dialRecord, commands []time.Time) {
	t.Helper()
	for _, st := range states {
		if st.NextAttempt.IsZero() || (st.State != agent.StateReconnecting && st.State != agent.StateError) {
			continue
		}
		for i, d := range dials {
			if d.at.After(st.seen) && d.at.Before(st.NextAttempt.Add(-time.Millisecond)) && !commanded(commands, st.seen, d.at) {
				t.Fatalf("dial %d at %v, before the attempt announced for %v (state %s seen at %v)",
					i, d.at.Format("15:04:05.000"), st.NextAttempt.Format("15:04:05.000"), st.State, st.seen.Format("15:04:05.000"))
			}
		}
	}
}
