package agent

import "time"

// BackoffForTest exposes the backoff draw to the external tests.
func BackoffForTest(s *Supervisor, attempt int) time.Duration { return s.backoff(attempt) }

// NewUnchecked builds a supervisor without the range checks of Config.Validate, so that tests
// can compress minutes into milliseconds.
func NewUnchecked(o Options) (*Supervisor, error) { return newSupervisor(o) }

// TimerWakesForTest is how often the state loop's timer has fired.
func TimerWakesForTest(s *Supervisor) uint64 { return s.timerWakes.Load() }

// PaceForTest is where the sender's pacer began counting the current session and what has been
// captured: call it from the sender (inside a Session's Send), which owns the pacer.
func PaceForTest(s *Supervisor) (start, captured int64) { return s.pacer.start, s.captured.Load() }

// ChunkBuffersMadeForTest is how many chunk buffers capture has had to make (none was free).
func ChunkBuffersMadeForTest(s *Supervisor) int64 { return s.chunkBufs.made.Load() }
