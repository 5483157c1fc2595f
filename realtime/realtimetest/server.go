// Package realtimetest is a protocol-faithful simulator of the realtime model servers
// omnisat talks to: the MiniCPM-o gateway in its current and legacy dialects, and Macaw
// OpenVoice. It is a real WebSocket server, strict about what it accepts so it catches
// client bugs, and it records what every client sent so tests can inspect it:
//
//	srv := realtimetest.NewServer(realtimetest.Options{})
//	defer srv.Close()
//	// dial srv.URL() + "?mode=audio" ...
//	rec := srv.Sessions()[0]
//
// See README.md for the wire behaviour and where it differs from real servers.
package realtimetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Dialect selects the protocol the simulator speaks.
type Dialect string

// Dialects.
const (
	Current   Dialect = "current"   // session.init / input.append / response.output.delta{kind}
	Legacy    Dialect = "legacy"    // session.update / input_audio_buffer.append / response.output_audio.delta
	OpenVoice Dialect = "openvoice" // Macaw OpenVoice: binary PCM16 up, JSON control, transcripts, TTS audio down
)

// ParseDialect parses a dialect name (as the CLI takes it).
func ParseDialect(s string) (Dialect, error) {
	switch d := Dialect(s); d {
	case Current, Legacy, OpenVoice:
		return d, nil
	}
	return "", fmt.Errorf("dialect %q is unknown (want current, legacy or openvoice)", s)
}

// Quirks lists the names SetQuirk takes, for the command line.
var Quirks = []string{"duplex-done", "double-closed", "ms-timestamps", "close-backend-error"}

// SetQuirk turns on the quirk of that name (see Quirks and the Options fields of the same names).
func (o *Options) SetQuirk(name string) error {
	switch name {
	case "duplex-done":
		o.DuplexDone = true
	case "double-closed":
		o.DoubleClosed = true
	case "ms-timestamps":
		o.MillisecondTS = true
	case "close-backend-error":
		o.CloseBackendError = true
	default:
		return fmt.Errorf("quirk %q is unknown (want one of %s)", name, strings.Join(Quirks, ", "))
	}
	return nil
}

// Path is the only endpoint the simulator serves; anything else is 404.
const Path = "/v1/realtime"

// DefaultReadLimit is the largest client message accepted (real servers: 128 MiB);
// a bigger one is answered with close 1009.
const DefaultReadLimit = 128 << 20

// Options configure a Server. The zero value is a usable current-dialect server.
type Options struct {
	Dialect  Dialect // default Current
	Workers  int     // concurrent sessions served; default 1
	MaxQueue int     // clients allowed to wait for a worker; 0 => 8; negative => no waiting allowed

	QueueUpdateInterval time.Duration // session.queue_update period; default 3s
	VideoLimit          time.Duration // mode=video session limit from worker assignment; default 300s
	AudioLimit          time.Duration // mode=audio session limit from worker assignment; default 600s

	// Unrecorded keeps of each session's record only what does not grow with its length:
	// no Audio, ReplyAudio, Appends, Interrupts, ChatRequests, TTSRequests, Received or Sent
	// (a TTS request's outcome then goes unrecorded too). For a simulator that serves
	// for hours and whose records nobody reads (the omnisat-simulator program, `make demo`):
	// with them its memory grows by all it hears and plays (418 MB after 37 minutes of one
	// client streaming).
	Unrecorded bool

	ContextLimit         int // kv cache limit; default 8192
	TokensPerAudioSecond int // kv growth per second of received audio; default 25
	ForceListenCount     int // first N chunks of a session answer listen; default 3; -1 for none
	ChatDisabled         bool

	PingInterval time.Duration // server WebSocket pings; default 20s
	PongTimeout  time.Duration // a client silent for PingInterval+PongTimeout is dropped; default 20s

	OpenVoiceTTSRate   int // PCM16 TTS audio rate sent by the OpenVoice simulator; default 24000
	OpenVoiceInputRate int // rate assumed for incoming OpenVoice PCM16; default 16000
	// OpenVoiceInactivity: an OpenVoice session that receives no binary audio for this long is
	// closed with session.closed{inactivity_timeout} and close 1000 (JSON and TTS do not count),
	// as the real server does after 60 s. Default 60s.
	OpenVoiceInactivity time.Duration
	// OpenVoiceSynthesisSpeed is how many seconds of TTS audio the OpenVoice simulator produces
	// per second: real engines send audio as fast as they synthesise it. Default 4.
	OpenVoiceSynthesisSpeed float64
	// TTSModels are the OpenVoice TTS models the server knows; a tts.speak under another
	// model_tts gets only error{code:"model_not_found", recoverable:true}. Empty: any.
	TTSModels []string

	NoExtraEvents bool          // current dialect: do not send response.step.done and kind:"audio_tokens" deltas
	StepDelay     time.Duration // simulated model time per full-duplex step / chat turn; default 0
	ReadLimit     int64         // largest client message in bytes; default DefaultReadLimit
	SpeechDBFS    float64       // energy detector threshold in dBFS (RMS over 20 ms); default -40
	// Quirks of real current-dialect deployments (PROTOCOL-FACTS), off by default:
	// DuplexDone ends a spoken full-duplex reply with response.done, as the C++ backend does,
	// instead of the PyTorch backend's extra kind:"listen".
	DuplexDone bool
	// DoubleClosed answers session.close with session.closed twice (the gateway and the worker
	// both answer), as the legacy gateway always does.
	DoubleClosed bool
	// MillisecondTS writes server_send_ts as integer milliseconds (one mock) instead of float
	// seconds.
	MillisecondTS bool
	// CloseBackendError answers the client's session.close with reason "backend_error", not the
	// client's reason: the upstream worker's race in its own shutdown.
	CloseBackendError bool

	// Reply, when set, is the audio (24 kHz mono) the full-duplex parrot answers with instead
	// of what it heard: a model that talks for as long as a test needs.
	Reply []float32
	// InterruptLag: a reply interrupted by force_listen goes on for this many more steps (one
	// audio delta each, under the same response id) before the server listens, as real gateways
	// keep streaming for a while what they had generated. 0 stops at once.
	InterruptLag int
	// InFlightGrace: input arriving this soon after a session.closed that left the socket open
	// (legacy context_full, OpenVoice, a keep-open close fault) was sent before the client could
	// know; it is ignored (counted), not rejected. Default 2s; <0: none.
	InFlightGrace time.Duration

	// Models are the OpenVoice STT models the server knows; any other model query parameter is
	// refused with error{code:"model_not_found", recoverable:false} and close 1008. Empty: any.
	Models []string
	// LateQueueLeave models the real gateway's queue, which does not read from waiting clients
	// and writes to them only every QueueUpdateInterval (not when a position changes): it
	// notices that a queued client has gone only at that client's next queue update.
	// A worker that frees before then is handed to the gone client and never freed again: the
	// server is jammed (see Server.Jammed) and later clients wait forever.
	LateQueueLeave bool

	Faults []Fault      // faults armed at start
	Logger *slog.Logger // nil = discard
}

func (o Options) withDefaults() Options {
	if o.Dialect == "" {
		o.Dialect = Current
	}
	if o.Workers <= 0 {
		o.Workers = 1
	}
	switch {
	case o.MaxQueue == 0:
		o.MaxQueue = 8
	case o.MaxQueue < 0:
		o.MaxQueue = 0
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.QueueUpdateInterval, 3*time.Second)
	def(&o.VideoLimit, 300*time.Second)
	def(&o.AudioLimit, 600*time.Second)
	def(&o.PingInterval, 20*time.Second)
	def(&o.PongTimeout, 20*time.Second)
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	defInt(&o.ContextLimit, 8192)
	defInt(&o.TokensPerAudioSecond, 25)
	defInt(&o.OpenVoiceTTSRate, 24000)
	defInt(&o.OpenVoiceInputRate, 16000)
	def(&o.OpenVoiceInactivity, 60*time.Second)
	if o.OpenVoiceSynthesisSpeed <= 0 {
		o.OpenVoiceSynthesisSpeed = 4
	}
	switch {
	case o.ForceListenCount == 0:
		o.ForceListenCount = 3
	case o.ForceListenCount < 0:
		o.ForceListenCount = 0
	}
	if o.ReadLimit <= 0 {
		o.ReadLimit = DefaultReadLimit
	}
	if o.SpeechDBFS == 0 {
		o.SpeechDBFS = -40
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.InFlightGrace == 0 {
		o.InFlightGrace = 2 * time.Second
	}
	return o
}

func (o Options) validate() error {
	if _, err := ParseDialect(string(o.Dialect)); err != nil {
		return err
	}
	for _, f := range o.Faults {
		if err := f.validFor(o.Dialect); err != nil {
			return err
		}
	}
	return nil
}

// Server is a running simulator.
type Server struct {
	opts   Options
	log    *slog.Logger
	ln     net.Listener
	hs     *http.Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	upgrader websocket.Upgrader

	mu       sync.Mutex
	closed   bool
	records  []*SessionRecord
	changed  chan struct{} // closed and replaced whenever records gain a session or one ends
	faults   []*armedFault
	live     map[*session]struct{}
	free     int
	waiting  []*waiter
	jammed   int // workers handed to clients that had gone (LateQueueLeave)
	lastIDMs int64
}

// NewServer starts a simulator on a free loopback port, like httptest.NewServer.
// It panics only if it cannot listen or opts are invalid (it is a test helper).
func NewServer(opts Options) *Server {
	s, err := Listen("127.0.0.1:0", opts)
	if err != nil {
		panic("realtimetest: " + err.Error())
	}
	return s
}

// Listen starts a simulator listening on addr (for example "127.0.0.1:8765").
func Listen(addr string, opts Options) (*Server, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("start simulator: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("start simulator: listen on %q: %w", addr, err)
	}
	return serve(ln, opts), nil
}

func serve(ln net.Listener, opts Options) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		live:    map[*session]struct{}{},
		free:    opts.Workers,
		upgrader: websocket.Upgrader{
			CheckOrigin: func(*http.Request) bool { return true },
		},
	}
	for _, f := range opts.Faults {
		s.faults = append(s.faults, &armedFault{Fault: f})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.serveHTTP)
	s.hs = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("simulator: serve", "addr", ln.Addr().String(), "err", err)
		}
	}()
	s.log.Info("simulator: listening", "url", s.URL(), "dialect", string(opts.Dialect), "workers", opts.Workers)
	return s
}

// URL is the WebSocket URL of the endpoint: "ws://127.0.0.1:PORT/v1/realtime".
func (s *Server) URL() string { return "ws://" + s.Addr() + Path }

// Addr is the listening address, host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: it closes the listener and every connection (with close
// code 1001) and waits for all of its goroutines.
func (s *Server) Close() {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		s.cancel()
		_ = s.hs.Close()
		s.wg.Wait()
		s.log.Info("simulator: closed", "url", s.URL())
	})
}

// AddFault arms a fault at run time. Faults that fire after N chunks also fire on
// running sessions that already passed N chunks, at once.
// An invalid fault is logged and ignored.
func (s *Server) AddFault(f Fault) {
	if err := f.validFor(s.opts.Dialect); err != nil {
		s.log.Error("simulator: fault not armed", "fault", f.String(), "err", err)
		return
	}
	s.mu.Lock()
	s.faults = append(s.faults, &armedFault{Fault: f})
	for ss := range s.live {
		select {
		case ss.faultWake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// Sessions returns a deep copy of every session record so far, in connection order.
func (s *Server) Sessions() []SessionRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SessionRecord, len(s.records))
	for i, r := range s.records {
		out[i] = r.clone()
	}
	return out
}

// Jammed reports whether a worker was handed to a queued client that had already gone and is
// lost for good (Options.LateQueueLeave): what a real one-worker gateway does until restarted.
func (s *Server) Jammed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jammed > 0
}

// WaitSessions waits until at least n sessions exist (WebSocket connections accepted).
func (s *Server) WaitSessions(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		have, ch, closed := len(s.records), s.changed, s.closed
		s.mu.Unlock()
		if have >= n {
			return nil
		}
		if closed {
			return fmt.Errorf("wait for %d simulator sessions (have %d): server closed", n, have)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for %d simulator sessions (have %d): %w", n, have, ctx.Err())
		}
	}
}

// WaitEnded waits until session index (0-based, connection order) has ended and
// returns its final record.
func (s *Server) WaitEnded(ctx context.Context, index int) (SessionRecord, error) {
	for {
		s.mu.Lock()
		ch, closed := s.changed, s.closed
		var rec *SessionRecord
		if index < len(s.records) {
			rec = s.records[index]
		}
		if rec != nil && !rec.EndedAt.IsZero() {
			c := rec.clone()
			s.mu.Unlock()
			return c, nil
		}
		s.mu.Unlock()
		if closed && rec == nil {
			return SessionRecord{}, fmt.Errorf("wait for simulator session %d to end: server closed", index)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return SessionRecord{}, fmt.Errorf("wait for simulator session %d to end: %w", index, ctx.Err())
		}
	}
}

// update runs f with the records locked.
func (s *Server) update(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// record runs f, which appends to a record's lists that grow with a session's length, unless
// the server keeps none (Options.Unrecorded).
func (s *Server) record(f func()) {
	if !s.opts.Unrecorded {
		s.update(f)
	}
}

// notifyLocked wakes WaitSessions / WaitEnded. s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "simulator is shutting down", http.StatusServiceUnavailable)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		s.log.Debug("simulator: upgrade refused", "remote", r.RemoteAddr, "err", err)
		return // the upgrader has answered with an HTTP error
	}
	q := r.URL.Query()
	rec := &SessionRecord{
		Dialect:     s.opts.Dialect,
		RemoteAddr:  r.RemoteAddr,
		ConnectedAt: time.Now(),
	}
	ss := &session{
		srv:       s,
		rec:       rec,
		dialect:   s.opts.Dialect,
		faultWake: make(chan struct{}, 1),
		fired:     map[*armedFault]bool{},
	}
	ss.mode, ss.modeErr = resolveMode(s.opts, q.Get("mode"))
	if s.opts.Dialect == OpenVoice {
		ss.model = q.Get("model")
		rec.Model = ss.model
		rec.Language = q.Get("language")
	}
	rec.Mode = ss.mode
	s.mu.Lock()
	rec.Index = len(s.records)
	s.records = append(s.records, rec)
	s.live[ss] = struct{}{}
	s.notifyLocked()
	s.mu.Unlock()
	ss.log = s.log.With("session", rec.Index, "remote", r.RemoteAddr, "mode", ss.mode)
	ss.log.Info("simulator: connection accepted", "query", r.URL.RawQuery)

	ss.c = newWSConn(s, ws, rec)
	ss.run()

	s.mu.Lock()
	delete(s.live, ss)
	s.mu.Unlock()
}

// resolveMode maps the mode query parameter to the public mode, or says why it is refused.
func resolveMode(o Options, mode string) (string, string) {
	switch o.Dialect {
	case OpenVoice:
		return "openvoice", ""
	case Legacy:
		if mode == "video" {
			return "video", ""
		}
		return "audio", "" // the legacy gateway treats anything else as audio
	}
	switch mode {
	case "":
		return "video", ""
	case "video", "audio":
		return mode, ""
	case "chat":
		if o.ChatDisabled {
			return "chat", "chat mode is disabled on this server"
		}
		return "chat", ""
	}
	return mode, fmt.Sprintf("unknown mode %q: want chat, video or audio", mode)
}

// waiter is a client waiting for a worker.
type waiter struct {
	assigned   chan struct{} // closed when a worker is assigned
	moved      chan struct{} // capacity 1: position changed
	isAssigned bool
}

// acquire takes a worker or joins the queue. w == nil && !full: a worker is assigned.
func (s *Server) acquire() (w *waiter, pos, qlen int, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		return nil, 0, 0, false
	}
	if len(s.waiting) >= s.opts.MaxQueue {
		return nil, 0, len(s.waiting), true
	}
	w = &waiter{assigned: make(chan struct{}), moved: make(chan struct{}, 1)}
	s.waiting = append(s.waiting, w)
	return w, len(s.waiting), len(s.waiting), false
}

// position is w's 1-based queue position (0 once assigned) and the queue length.
func (s *Server) position(w *waiter) (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range s.waiting {
		if o == w {
			return i + 1, len(s.waiting)
		}
	}
	return 0, len(s.waiting)
}

// release frees a worker: the first waiter gets it (FIFO).
func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *Server) releaseLocked() {
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	w := s.waiting[0]
	s.waiting = s.waiting[1:]
	w.isAssigned = true
	close(w.assigned)
	for _, o := range s.waiting {
		select {
		case o.moved <- struct{}{}:
		default:
		}
	}
}

// leave takes w out of the queue; if it was assigned meanwhile, its worker is released.
func (s *Server) leave(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.isAssigned {
		s.releaseLocked()
		return
	}
	for i, o := range s.waiting {
		if o != w {
			continue
		}
		s.waiting = append(s.waiting[:i:i], s.waiting[i+1:]...)
		for _, b := range s.waiting[i:] {
			select {
			case b.moved <- struct{}{}:
			default:
			}
		}
		return
	}
}

// jam records a worker lost to a client that had gone while queued.
func (s *Server) jam() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jammed++
}

// claimAtConnect takes an armed fault of a kind that acts before session.created, if one is
// available for this session.
func (s *Server) claimAtConnect(kind FaultKind) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.faults {
		if a.Kind == kind && a.available() {
			a.fired++
			f := a.Fault
			return &f
		}
	}
	return nil
}

// claimFault takes the next fault due for a session that has accepted n chunks.
func (s *Server) claimFault(fired map[*armedFault]bool, n int) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.faults {
		if a.Kind.atConnect() || fired[a] || !a.available() || n < a.AfterAppends {
			continue
		}
		fired[a] = true
		a.fired++
		f := a.Fault
		return &f
	}
	return nil
}

// legacyID returns "rt_<unix ms>", unique within the server.
func (s *Server) legacyID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := max(time.Now().UnixMilli(), s.lastIDMs+1)
	s.lastIDMs = ms
	return fmt.Sprintf("rt_%d", ms)
}

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
