package agent

import "time"

// BackoffForTest exposes the backoff draw to the external tests.
func BackoffForTest(s *Supervisor, attempt int) time.Duration { return s.backoff(attempt) }
