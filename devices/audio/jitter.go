package audio

import "time"

// SetJitterBuffer sets how long reply audio that arrives into silence waits before it plays
// (pipeline.Playback.SetJitterBuffer): it absorbs the stutter of a server that produces about
// a second of speech per second of wall time.
func (s *Speaker) SetJitterBuffer(d time.Duration) { s.pb.SetJitterBuffer(d) }

// Underruns counts the times playback ran dry while playing (agent.UnderrunCounter).
func (s *Speaker) Underruns() int64 { return s.pb.Stats().Underruns }
