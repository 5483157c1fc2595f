package agent

import (
	"errors"
	"fmt"
	"time"
)

// Policy says when the agent holds a session with the server.
type Policy string

const (
	// PolicyAlways connects at start and keeps a session forever: the kiosk default.
	PolicyAlways Policy = "always"
	// PolicyOnDemand starts a session on a command and ends it after IdleTimeout without speech.
	PolicyOnDemand Policy = "on_demand"
	// PolicyVoice starts a session when local voice activity is heard; the pre-roll before the
	// session was ready is sent first, so the first words are not lost.
	PolicyVoice Policy = "voice"
)

// Config is the `session:` section of the configuration file.
type Config struct {
	Policy Policy `yaml:"policy"`
	// Chunk is the audio sent per input.append: 250 ms to 1 s.
	Chunk time.Duration `yaml:"chunk"`
	// FramesPerChunk is how many camera frames ride on each chunk in mode=video (evenly spaced).
	FramesPerChunk int `yaml:"frames_per_chunk"`
	// MaxLag bounds unsent audio while connected: older audio is dropped (and counted) so the
	// conversation stays live when the link falls behind.
	MaxLag time.Duration `yaml:"max_lag"`
	// ReconnectBuffer is how much audio captured while (re)connecting is kept and sent first.
	ReconnectBuffer time.Duration `yaml:"reconnect_buffer"`
	// PreRoll is the audio kept before speech starts a session (policy voice).
	PreRoll time.Duration `yaml:"pre_roll"`
	// IdleTimeout ends an on_demand or voice session after this long with no speech either way.
	IdleTimeout time.Duration `yaml:"idle_timeout"`

	// BackoffMin and BackoffMax bound the wait before a new session after a failure (a refused or
	// failed connect, or a session that ended before it was useful): the n-th wait in a row is
	// drawn from [min·2ⁿ⁻¹, min·2ⁿ], at most [max/2, max].
	BackoffMin time.Duration `yaml:"backoff_min"`
	BackoffMax time.Duration `yaml:"backoff_max"`
	// ConfigErrorRetry is how long the agent waits before trying again after an error that
	// retrying should not fix (authentication, wrong dialect, unknown model): slowly, so that a
	// device heals by itself once the server or its settings are fixed.
	ConfigErrorRetry time.Duration `yaml:"config_error_retry"`
	// CatchUpRate bounds how much faster than real time queued audio (captured during a gap)
	// is sent: a multiple of real time.
	CatchUpRate float64 `yaml:"catch_up_rate"`

	// ContextLimit is the server's kv cache size; the agent rolls over ContextMargin tokens before.
	ContextLimit  int `yaml:"context_limit"`
	ContextMargin int `yaml:"context_margin"`
	// TimeLimit is the server's session limit (0: 300 s for video, 600 s for audio); the agent rolls
	// over TimeMargin before it.
	TimeLimit  time.Duration `yaml:"time_limit"`
	TimeMargin time.Duration `yaml:"time_margin"`
	// Overlap opens the next session before closing the old one. Turn it off for servers with a
	// single worker, where the next session would wait behind the old one.
	Overlap *bool `yaml:"overlap"`
	// SwitchWait bounds how long a ready next session waits for the model to be listening.
	SwitchWait time.Duration `yaml:"switch_wait"`

	// CarryOver adds a bounded summary of the conversation to the next session's instructions.
	CarryOver      *bool `yaml:"carry_over"`
	CarryOverChars int   `yaml:"carry_over_chars"`

	// ListenGrace is the reply audio still played after the model switches to listening, beyond
	// the last delta: audio generated further ahead than this is dropped (see README).
	ListenGrace time.Duration `yaml:"listen_grace"`

	// VADThreshold is the local voice detector's level in dBFS (policy voice, idle detection).
	VADThreshold float64 `yaml:"vad_threshold_dbfs"`

	// BargeIn interrupts the model when the user talks over it (session.barge_in).
	BargeIn BargeInConfig `yaml:"barge_in"`
}

// BargeInConfig is session.barge_in: the local voice detector on the (echo-cancelled)
// microphone signal stops the model's speech when the user speaks while it plays.
type BargeInConfig struct {
	Enabled *bool `yaml:"enabled"` // default true
	// ThresholdDBFS is the level that counts as the user speaking (the sensitivity: lower is
	// more sensitive). Default -35.
	ThresholdDBFS float64 `yaml:"threshold_dbfs"`
	// MinSpeech is how long speech must last to interrupt, so a cough or a click does not.
	// Default 150ms.
	MinSpeech time.Duration `yaml:"min_speech"`
}

// WithDefaults fills in every unset field.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Policy == "" {
		c.Policy = PolicyAlways
	}
	def(&c.Chunk, time.Second)
	if c.FramesPerChunk == 0 {
		c.FramesPerChunk = 1
	}
	def(&c.MaxLag, 2*time.Second)
	def(&c.ReconnectBuffer, 3*time.Second)
	def(&c.PreRoll, time.Second)
	def(&c.IdleTimeout, 30*time.Second)
	def(&c.BackoffMin, time.Second)
	def(&c.BackoffMax, 30*time.Second)
	def(&c.ConfigErrorRetry, 5*time.Minute)
	if c.CatchUpRate == 0 {
		c.CatchUpRate = 1.1
	}
	if c.ContextLimit == 0 {
		c.ContextLimit = 8192
	}
	if c.ContextMargin == 0 {
		c.ContextMargin = 1024
	}
	def(&c.TimeMargin, 20*time.Second)
	def(&c.SwitchWait, 15*time.Second)
	if c.Overlap == nil {
		c.Overlap = ptr(true)
	}
	if c.CarryOver == nil {
		c.CarryOver = ptr(true)
	}
	if c.CarryOverChars == 0 {
		c.CarryOverChars = 1200
	}
	def(&c.ListenGrace, 250*time.Millisecond)
	if c.VADThreshold == 0 {
		c.VADThreshold = -40
	}
	if c.BargeIn.Enabled == nil {
		c.BargeIn.Enabled = ptr(true)
	}
	if c.BargeIn.ThresholdDBFS == 0 {
		c.BargeIn.ThresholdDBFS = -35
	}
	def(&c.BargeIn.MinSpeech, 150*time.Millisecond)
	return c
}

func ptr[T any](v T) *T { return &v }

// Validate reports every field a configuration file may not hold (joined errors), each with its
// path under "session.": what cannot work (see check), and values outside the range a person
// can defend. A 1 ns backoff dials thousands of times a second and a 100000 h lag is no
// conversation: each range says what still makes sense on a satellite.
func (c Config) Validate() error {
	var errs []error
	outside := func(key string, v, lo, hi time.Duration, bounds string) {
		if v >= 0 && (v < lo || v > hi) { // a negative value is check's
			errs = append(errs, fmt.Errorf("session.%s: %v is outside %s", key, v, bounds))
		}
	}
	// Audio older than this is stale: beyond ~30 s the conversation is no longer live.
	outside("max_lag", c.MaxLag, 0, 30*time.Second, "one chunk..30s") // at least a chunk: check
	// Replayed after a gap or a wake-up: more than 30 s is a monologue from the past.
	outside("reconnect_buffer", c.ReconnectBuffer, 0, 30*time.Second, "0..30s")
	outside("pre_roll", c.PreRoll, 0, 10*time.Second, "0..10s")
	// Shorter ends a session between two sentences; a day is the longest "idle" means anything.
	outside("idle_timeout", c.IdleTimeout, 5*time.Second, 24*time.Hour, "5s..24h")
	// A first retry sooner than 0.5 s only hammers a server that just failed (PROTOCOL-FACTS:
	// fast reconnects can wedge a gateway's queue); after an hour a device is as good as off.
	outside("backoff_min", c.BackoffMin, 500*time.Millisecond, time.Minute, "500ms..1m")
	outside("backoff_max", c.BackoffMax, time.Second, time.Hour, "1s..1h")
	// Servers end sessions after 300 s (video) or 600 s (audio); 0 takes those.
	if c.TimeLimit != 0 {
		outside("time_limit", c.TimeLimit, 30*time.Second, 24*time.Hour, "0 (by mode) or 30s..24h")
	}
	// At most 2 min, so that it always fits the shortest server limit (300 s).
	outside("time_margin", c.TimeMargin, time.Second, 2*time.Minute, "1s..2m")
	outside("switch_wait", c.SwitchWait, time.Second, 2*time.Minute, "1s..2m")
	outside("listen_grace", c.ListenGrace, 0, 2*time.Second, "0..2s")
	// Retrying a configuration error more often than every 10 s only hammers a server that
	// refused; after a day a device is as good as off.
	outside("config_error_retry", c.ConfigErrorRetry, 10*time.Second, 24*time.Hour, "10s..24h")
	// Macaw OpenVoice answers more than 1.2× real time with session.rate_limit; twice real time
	// catches a 3 s gap up in 3 s where a server without a limit is trusted.
	if c.CatchUpRate > 0 && !(c.CatchUpRate >= 1.05 && c.CatchUpRate <= 2) {
		errs = append(errs, fmt.Errorf("session.catch_up_rate: %v is outside 1.05..2 (times real time)", c.CatchUpRate))
	}
	// The model's context in tokens: MiniCPM-o's is 8192; no model has more than 2^20.
	if c.ContextLimit < 512 || c.ContextLimit > 1<<20 {
		errs = append(errs, fmt.Errorf("session.context_limit: %d is outside 512..1048576", c.ContextLimit))
	}
	return errors.Join(append(errs, c.check())...)
}

// check reports the fields that cannot work at all: out of their domain, or contradicting each
// other. agent.New needs only this (tests run with millisecond backoffs); configuration files
// also get Validate's ranges.
func (c Config) check() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch c.Policy {
	case PolicyAlways, PolicyOnDemand, PolicyVoice:
	default:
		bad("session.policy: %q is not one of always, on_demand, voice", c.Policy)
	}
	if c.Chunk < 250*time.Millisecond || c.Chunk > time.Second {
		bad("session.chunk: %v is outside 250ms..1s", c.Chunk)
	}
	if c.FramesPerChunk < 0 || c.FramesPerChunk > 10 {
		bad("session.frames_per_chunk: %d is outside 0..10", c.FramesPerChunk)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"max_lag", c.MaxLag}, {"reconnect_buffer", c.ReconnectBuffer}, {"pre_roll", c.PreRoll}, {"idle_timeout", c.IdleTimeout},
		{"backoff_min", c.BackoffMin}, {"backoff_max", c.BackoffMax}, {"time_margin", c.TimeMargin}, {"switch_wait", c.SwitchWait},
		{"listen_grace", c.ListenGrace}} {
		if d.v < 0 {
			bad("session.%s: %v is negative", d.name, d.v)
		}
	}
	if c.MaxLag < c.Chunk {
		bad("session.max_lag: %v is shorter than one chunk (%v)", c.MaxLag, c.Chunk)
	}
	if c.BackoffMax < c.BackoffMin {
		bad("session.backoff_max: %v is shorter than backoff_min %v", c.BackoffMax, c.BackoffMin)
	}
	if c.ContextLimit < 1 || c.ContextMargin < 0 || c.ContextMargin >= c.ContextLimit {
		bad("session.context_margin: %d must be between 0 and context_limit %d", c.ContextMargin, c.ContextLimit)
	}
	if c.TimeLimit < 0 || (c.TimeLimit > 0 && c.TimeMargin >= c.TimeLimit) {
		bad("session.time_margin: %v must be shorter than time_limit %v", c.TimeMargin, c.TimeLimit)
	}
	if c.CarryOverChars < 0 || c.CarryOverChars > 20000 {
		bad("session.carry_over_chars: %d is outside 0..20000", c.CarryOverChars)
	}
	if c.VADThreshold > 0 || c.VADThreshold < -100 {
		bad("session.vad_threshold_dbfs: %v is outside -100..0", c.VADThreshold)
	}
	if !(c.BargeIn.ThresholdDBFS >= -100 && c.BargeIn.ThresholdDBFS <= 0) {
		bad("session.barge_in.threshold_dbfs: %v is outside -100..0", c.BargeIn.ThresholdDBFS)
	}
	if c.BargeIn.MinSpeech < 20*time.Millisecond || c.BargeIn.MinSpeech > 5*time.Second {
		bad("session.barge_in.min_speech: %v is outside 20ms..5s", c.BargeIn.MinSpeech)
	}
	if c.ConfigErrorRetry <= 0 {
		bad("session.config_error_retry: %v is not positive", c.ConfigErrorRetry)
	}
	// At 1 or below a backlog would never be caught up; NaN compares false.
	if !(c.CatchUpRate > 1 && c.CatchUpRate <= 10) {
		bad("session.catch_up_rate: %v is outside 1..10 (times real time)", c.CatchUpRate)
	}
	return errors.Join(errs...)
}

// minUsableContext is the least room, in tokens, a session must leave for the conversation
// itself once its instructions are in: about ten seconds of audio. With less, every session
// would need its rollover as soon as it starts.
const minUsableContext = 256

// estimateTokens is a rough token count of a prompt (about four characters a token in English;
// fewer characters a token in other scripts, so this errs on the side of accepting).
func estimateTokens(text string) int { return (len(text) + 3) / 4 }

// CheckContext reports whether sessions started with these instructions (plus, with carry-over,
// the conversation summary) can ever be useful before their rollover at context_limit −
// context_margin. A combination that cannot is a configuration error: it would roll over again
// and again.
func (c Config) CheckContext(instructions string) error {
	c = c.WithDefaults()
	if c.ContextMargin >= c.ContextLimit {
		return nil // Validate reports it
	}
	prompt := estimateTokens(instructions)
	carry := 0
	if *c.CarryOver {
		carry = (c.CarryOverChars + 3) / 4
	}
	room := c.ContextLimit - c.ContextMargin - prompt - carry
	if room >= minUsableContext {
		return nil
	}
	return fmt.Errorf("session.context_margin: context_limit %d − context_margin %d leaves %d tokens, of which the instructions take ~%d "+
		"and the carry-over up to ~%d (session.carry_over_chars): less than the %d a session needs to be useful before its rollover; "+
		"raise context_limit, lower context_margin or carry_over_chars, or shorten server.instructions",
		c.ContextLimit, c.ContextMargin, c.ContextLimit-c.ContextMargin, prompt, carry, minUsableContext)
}
