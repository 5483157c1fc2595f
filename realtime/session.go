package realtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/internal/quiettimer"
)

// outMsg is one frame for the writer goroutine.
type outMsg struct {
	binary bool
	data   []byte
	// splits, when set, cut data into several messages at these offsets (OpenVoice audio in
	// small frames); they go out back to back and count as one for delivery.
	splits []int
	// media marks a chunk from Send (followed until acknowledged); id is the caller's id for it.
	media bool
	id    uint64
	// goodbye is session.close: the one message that goes out once Close has started.
	goodbye bool
}

// codec is one dialect: it turns session operations into frames and frames into events.
type codec interface {
	// queued reports whether the server runs a queue before init (MiniCPM-o) or greets at once.
	queued() bool
	initMsgs(Init) ([]outMsg, error)
	chunk(c Chunk, in Init, buf []byte) (outMsg, error) // buf: room the message may reuse
	chat(ChatRequest) (outMsg, error)
	speak(Speech) (outMsg, string, error)
	cancelSpeech() (outMsg, error)
	commit() (outMsg, error)
	// closeMsg is the polite goodbye, if the dialect has one.
	closeMsg(reason string) (outMsg, bool)
	// decode turns one frame into events, internal ones included; it never fails the session:
	// problems come back as ErrorEvent (or as a mismatch/closed signal for the session to act on).
	// data is valid only during the call (the read buffer is reused): events keep none of it.
	decode(binary bool, data []byte, emit func(Event))
}

// Internal events, consumed by the session itself and never delivered to the caller.
type (
	queueSignal   struct{ status QueueStatus }
	createdSignal struct{ info Info }
	closedSignal  struct {
		reason, diagnostic string
		duration           time.Duration // OpenVoice total_duration_ms
		segments           int           // OpenVoice segments_transcribed
	}
	// rateLimitSignal is OpenVoice's session.rate_limit: hold media back, then tell the caller.
	rateLimitSignal struct{ limit RateLimit }
	// serverErrSignal is an `error` from the server that affects the session's fate.
	serverErrSignal struct{ err *Error }
	// fatalSignal ends the session with err (e.g. the other dialect answered).
	fatalSignal struct{ err *Error }
)

func (queueSignal) event()     {}
func (createdSignal) event()   {}
func (closedSignal) event()    {}
func (rateLimitSignal) event() {}
func (serverErrSignal) event() {}
func (fatalSignal) event()     {}

type session struct {
	cfg   Config
	codec codec
	// bufs are the message buffers the session reads, builds and decodes in: shared with the
	// other sessions of its client (Config.Buffers), or its own.
	bufs *Buffers
	conn *websocket.Conn
	// raw is the TCP connection under TLS and WebSocket, wire counts what is written to it.
	raw  net.Conn
	wire *countingConn
	log  interface {
		Debug(string, ...any)
		Warn(string, ...any)
	}

	info   Info
	events chan Event

	// The outgoing side, guarded by mu: the writer takes messages from queue in order.
	mu       sync.Mutex
	queue    []outMsg
	room     chan struct{} // closed (and replaced) whenever the writer takes a message
	wake     chan struct{} // capacity 1: the queue has work for the writer
	closing  bool          // Close has started: nothing but the goodbye goes out any more
	ended    bool          // the session is over; undelivered is final
	inflight *outMsg       // the message being written
	track    deliveryTracker
	// undelivered: the caller's ids of media chunks the peer never acknowledged (set at the end).
	undelivered []uint64
	sendBuffer  int // the socket send buffer asked for so far (writer only)

	done      chan struct{} // closed when the session has ended
	endOnce   sync.Once
	endErr    *Error // why it ended; nil for a clean close we asked for
	endReason string
	endDiag   string
	endTotals closedSignal // the server's totals in its session.closed (OpenVoice)

	// holdMedia is when media may go out again (unix nanoseconds) after the server asked us to
	// slow down (OpenVoice session.rate_limit).
	holdMedia atomic.Int64

	closeCalled chan struct{} // closed when Close starts: the consumer may stop reading events
	closeOnce   sync.Once
	closeReason atomic.Value // string: the reason we sent in session.close

	bytesSent, bytesRecv atomic.Uint64
	// born is when the session was made; the link's times below are durations since then on the
	// monotonic clock (see since), so that a wall clock set at boot (a Pi without a real-time
	// clock, when NTP first answers) neither kills a live link nor hides a dead one.
	born    time.Time
	heardAt atomic.Int64 // when the server last spoke on its own (a frame or a ping)
	pongAt  atomic.Int64 // when the server last answered a ping of ours

	// The link's watchdogs (watchLoop): silence expires PingInterval after the server last
	// spoke (a ping is due, then the link may be dead), stall WriteTimeout after a write began
	// that has not ended. Both are pushed back at every message and every write; they are
	// quiettimers, which do that without waking the process at the times they were first
	// due, as read and write deadlines moved at every message did (about twice a second while
	// streaming). writingSince is when the write under way began (0: none).
	silence, stall *quiettimer.Timer
	writingSince   atomic.Int64
	pingDue        chan struct{} // capacity 1: watchLoop asks the writer for a ping

	lastServerErr atomic.Pointer[Error] // the latest gateway error, to explain a following close
	initSent      atomic.Bool
	// created is set by the read loop when session.created arrives, before anything after it is
	// handled: a refusal of init is judged against it, not against Dial having caught up.
	created atomic.Bool
	// leaveBy is, once Dial's caller has given up, until when the dial may stay in the server's
	// queue for its worker (zero: leave at once); asked once, when first needed.
	leaveBy func() time.Time

	wg sync.WaitGroup
}

func dial(ctx context.Context, cfg Config) (Session, error) {
	bufs := cfg.Buffers
	if bufs == nil {
		bufs = NewBuffers()
	}
	s := &session{
		born:        time.Now(),
		cfg:         cfg,
		codec:       newCodec(cfg, &bufs.samples),
		bufs:        bufs,
		log:         cfg.Logger,
		events:      make(chan Event, cfg.EventBuffer),
		room:        make(chan struct{}),
		wake:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		closeCalled: make(chan struct{}),
		info:        Info{Dialect: cfg.Dialect, Mode: cfg.Mode},
	}
	s.leaveBy = sync.OnceValue(s.queueLeaveDeadline)
	netDial := cfg.netDial
	if netDial == nil {
		netDial = (&net.Dialer{}).DialContext
	}
	dialer := websocket.Dialer{
		HandshakeTimeout:  cfg.DialTimeout,
		TLSClientConfig:   cfg.TLS,
		Proxy:             http.ProxyFromEnvironment,
		EnableCompression: false,
		// One media message, one frame, one write: with gorilla's 4 KiB default a 1 s audio
		// chunk (~85 KB of JSON) went out as 21 frames and 21 write calls.
		WriteBufferSize: wireWriteBuffer,
		WriteBufferPool: &bufs.write,
		// The TCP connection itself, under TLS: its send buffer is kept small and the kernel is
		// asked what of it the peer has acknowledged.
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := netDial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			s.raw, s.wire = c, newCountingConn(c)
			s.growSendBuffer(minSendBuffer)
			return s.wire, nil
		},
	}
	header := http.Header{}
	for k, v := range cfg.Header {
		header[k] = append([]string(nil), v...)
	}
	if cfg.Token != "" {
		header.Set("Authorization", "Bearer "+cfg.Token)
	}
	// A gateway may queue the client as soon as it has answered the handshake: a dial given up
	// then must not vanish by cutting the handshake short when it is to wait for its worker.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.DialTimeout)
	givingUp := context.AfterFunc(ctx, func() {
		if by := s.leaveBy(); by.IsZero() {
			cancel()
		} else {
			time.AfterFunc(time.Until(by), cancel)
		}
	})
	defer givingUp()
	conn, resp, err := dialer.DialContext(dctx, cfg.endpoint(), header)
	cancel()
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, handshakeError(cfg, resp, err)
	}
	s.conn = conn
	conn.SetReadLimit(cfg.MaxFrameBytes)
	s.silence, s.stall, s.pingDue = quiettimer.New(), quiettimer.New(), make(chan struct{}, 1)
	s.heard()
	conn.SetPongHandler(func(string) error { s.pongAt.Store(s.since()); return nil })
	conn.SetPingHandler(func(data string) error {
		s.heard()
		// A failed pong is not the reader's business: if the link is gone, the next read says
		// so, with the server's close frame when there is one.
		_ = conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(cfg.WriteTimeout))
		return nil
	})

	s.wg.Add(3)
	go s.readLoop()
	go s.writeLoop()
	go s.watchLoop()

	if err := s.setup(ctx); err != nil {
		s.closeOnce.Do(func() { close(s.closeCalled) }) // nobody will read the events now
		if err.Class == ClassEnded || err.Class == ClassProtocol {
			// A session that never started did not end in the normal course: try again later.
			err.Class = ClassRetryable
		}
		s.end(err, "", "")
		s.wg.Wait()
		return nil, err
	}
	return s, nil
}

// handshakeError explains a failed connect: refused, unreachable, or an HTTP status instead of 101.
func handshakeError(cfg Config, resp *http.Response, err error) *Error {
	where := cfg.redactedEndpoint()
	if resp != nil {
		e := &Error{Class: ClassRetryable, Code: CodeHandshake, Err: err,
			Message: fmt.Sprintf("connect %s: server answered HTTP %d instead of a WebSocket upgrade", where, resp.StatusCode)}
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			e.Class = ClassConfig
			e.Message += " (authentication refused: check the token)"
		case http.StatusNotFound, http.StatusBadRequest, http.StatusMethodNotAllowed:
			e.Class = ClassConfig
			e.Message += " (wrong URL or parameters?)"
		}
		return e
	}
	return &Error{Class: ClassRetryable, Code: CodeDial, Err: err, Message: fmt.Sprintf("connect %s", where)}
}

// setup waits through the queue, sends init and waits for session.created (order per dialect).
// The queue has no deadline (that is how gateways work); the wait for session.created has.
func (s *session) setup(ctx context.Context) *Error {
	if !s.codec.queued() {
		if err := s.awaitCreated(ctx); err != nil {
			return err
		}
		return s.sendInit(ctx)
	}
	for {
		ev, err := s.nextSetupEvent(ctx, nil)
		if err != nil {
			if ctx.Err() != nil {
				s.leaveQueue()
			}
			return err
		}
		if q, ok := ev.(queueSignal); ok {
			if s.cfg.OnQueue != nil {
				s.cfg.OnQueue(q.status)
			}
			if q.status.Done {
				break
			}
			continue
		}
		s.log.Debug("realtime: ignoring event before queue_done", "event", fmt.Sprintf("%T", ev))
	}
	if ctx.Err() != nil { // given up as the worker came: hand it back before starting anything
		s.handBack()
		return s.givenUp(ctx)
	}
	if err := s.sendInit(ctx); err != nil {
		return err
	}
	err := s.awaitCreated(ctx)
	if err != nil && ctx.Err() != nil {
		s.handBack() // the worker has begun a session for us: end it politely
	}
	return err
}

// queueLeaveDeadline asks the caller, as it gives the dial up, how long to stay in the queue.
func (s *session) queueLeaveDeadline() time.Time {
	if !s.codec.queued() || s.cfg.QueueLeaveWait == nil {
		return time.Time{}
	}
	wait := s.cfg.QueueLeaveWait()
	if wait <= 0 {
		return time.Time{}
	}
	return time.Now().Add(wait)
}

// leaveQueue is how a dial given up in the queue phase leaves (see Config.QueueLeaveWait): it
// waits for its worker and hands it back with session.close, or leaves when the wait is over.
// Until the server's first queue message it may be queued or assigned: it waits as well.
func (s *session) leaveQueue() {
	by := s.leaveBy()
	if by.IsZero() || s.isDone() {
		return
	}
	limit := time.NewTimer(time.Until(by))
	defer limit.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return
			}
			if _, closed := ev.(Closed); closed {
				return
			}
			if q, isQueue := ev.(queueSignal); isQueue && q.status.Done {
				s.handBack()
				return
			}
		case <-limit.C:
			s.log.Warn("realtime: gave up waiting in the server's queue to hand the worker back; leaving: " +
				"a gateway that has not noticed may give its next free worker to this gone client")
			return
		}
	}
}

// handBack closes a session that has its worker but was never handed to the caller.
func (s *session) handBack() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
	defer cancel()
	s.Close(ctx, "user_stop")
}

func (s *session) sendInit(ctx context.Context) *Error {
	msgs, err := s.codec.initMsgs(s.cfg.Init)
	if err != nil {
		return &Error{Class: ClassConfig, Code: CodeConfig, Message: "encode session init", Err: err}
	}
	// Marked before sending: the answer may be read before this goroutine runs again.
	s.initSent.Store(true)
	for _, m := range msgs {
		if err := s.enqueue(ctx, m); err != nil {
			return asError(err, "send session init")
		}
	}
	return nil
}

func (s *session) awaitCreated(ctx context.Context) *Error {
	deadline := time.NewTimer(s.cfg.InitTimeout)
	defer deadline.Stop()
	for {
		ev, err := s.nextSetupEvent(ctx, deadline.C)
		if err != nil {
			return err
		}
		switch ev := ev.(type) {
		case createdSignal:
			s.info.ID = ev.info.ID
			s.info.ServerMode = ev.info.ServerMode
			s.info.Metrics = ev.info.Metrics
			return nil
		case queueSignal:
			// A late queue report is harmless.
		default:
			s.log.Debug("realtime: ignoring event before session.created", "event", fmt.Sprintf("%T", ev))
		}
	}
}

// nextSetupEvent reads the next event during set-up; the session's end, the phase's deadline
// and ctx become errors.
func (s *session) nextSetupEvent(ctx context.Context, deadline <-chan time.Time) (Event, *Error) {
	select {
	case ev, ok := <-s.events:
		if !ok {
			return nil, s.setupEndError()
		}
		if c, isClosed := ev.(Closed); isClosed {
			if c.Err != nil {
				return nil, c.Err
			}
			return nil, s.setupEndError()
		}
		return ev, nil
	case <-deadline:
		return nil, s.initTimeout(fmt.Sprintf("within %v", s.cfg.InitTimeout))
	case <-ctx.Done():
		if deadline != nil {
			e := s.initTimeout("before the caller gave up")
			e.Err = ctx.Err()
			return nil, e
		}
		return nil, s.givenUp(ctx)
	}
}

// givenUp is the error of a set-up the caller gave up.
func (s *session) givenUp(ctx context.Context) *Error {
	return &Error{Class: ClassRetryable, Code: CodeDial, Err: ctx.Err(),
		Message: fmt.Sprintf("set up session at %s: %v", s.cfg.redactedEndpoint(), ctx.Err())}
}

// initTimeout explains an unanswered init. The likeliest cause is a server of the other dialect
// (a legacy gateway ignores session.init), but silence is no proof of it: retryable.
func (s *session) initTimeout(when string) *Error {
	where := s.cfg.redactedEndpoint()
	var msg string
	switch {
	case s.cfg.Dialect == DialectOpenVoice:
		msg = fmt.Sprintf("%s: no session.created %s of connecting: is this an OpenVoice server? a MiniCPM-o gateway needs server.dialect: current or legacy", where, when)
	case s.cfg.Dialect == DialectLegacy:
		msg = fmt.Sprintf("%s: no answer to session.update %s: is this a current-dialect gateway? set server.dialect: current", where, when)
	case s.cfg.Mode == ModeChat:
		msg = fmt.Sprintf("%s: no answer to session.init %s: is this a legacy gateway? a legacy gateway has no chat mode; chat needs a current-dialect server", where, when)
	default:
		msg = fmt.Sprintf("%s: no answer to session.init %s: is this a legacy gateway? set server.dialect: legacy", where, when)
	}
	if se := s.lastServerErr.Load(); se != nil {
		msg += fmt.Sprintf(" (the server said: %s)", se.Message)
	}
	return &Error{Class: ClassRetryable, Code: CodeInitTimeout, Message: msg}
}

func (s *session) setupEndError() *Error {
	<-s.done
	if s.endErr != nil {
		return s.endErr
	}
	return &Error{Class: ClassRetryable, Code: CodeSessionClosed, Reason: s.endReason,
		Message: fmt.Sprintf("server closed the session during set-up (reason %q)", s.endReason)}
}

// readLoop is the only reader and the only sender on s.events. It keeps reading at all times so
// that pings are answered, and emits Closed last.
func (s *session) readLoop() {
	defer s.wg.Done()
	defer close(s.events)
	for {
		typ, r, err := s.conn.NextReader()
		var data []byte
		if err == nil {
			// The read buffer is taken for one message and given back once it is decoded:
			// the decoders keep nothing of it.
			data, err = readAll(r, s.bufs.read.take())
		}
		if err != nil {
			s.end(s.readError(err), "", "")
			break
		}
		s.heard()
		s.bytesRecv.Add(uint64(len(data)))
		if typ == websocket.TextMessage || typ == websocket.BinaryMessage {
			s.codec.decode(typ == websocket.BinaryMessage, data, s.handle)
		}
		s.bufs.read.give(data)
		if s.isDone() {
			break
		}
	}
	<-s.done
	s.mu.Lock()
	undelivered := s.undelivered
	s.mu.Unlock()
	s.emit(Closed{Reason: s.endReason, Diagnostic: s.endDiag, Err: s.endErr, Undelivered: undelivered,
		ServerDuration: s.endTotals.duration, Segments: s.endTotals.segments}, true)
}

// readAll reads the rest of a message into b (as io.ReadAll does, reusing b's room).
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// handle routes one decoded event: internal signals act on the session, the rest go to the caller.
func (s *session) handle(ev Event) {
	switch ev := ev.(type) {
	case closedSignal:
		s.endClosed(s.closedError(ev.reason, ev.diagnostic), ev)
		return
	case rateLimitSignal:
		if d := ev.limit.Delay; d > 0 {
			s.holdMedia.Store(time.Now().Add(min(d, maxRateLimitHold)).UnixNano())
		}
		s.emit(ev.limit, false)
		return
	case serverErrSignal:
		s.lastServerErr.Store(ev.err)
		if !s.created.Load() && s.initSent.Load() && ev.err.Code == "unknown_event" {
			// The server does not know our init's event type: it speaks the other dialect.
			s.end(s.mismatch(ev.err.Message), "", "")
			return
		}
		s.emit(ErrorEvent{Err: ev.err}, false)
		return
	case fatalSignal:
		s.end(ev.err, "", "")
		return
	case createdSignal:
		if s.created.Swap(true) {
			return // a second session.created: nothing to do
		}
	case queueSignal:
		if s.created.Load() {
			return // stray after set-up: nothing to do
		}
	case ErrorEvent:
		s.log.Warn("realtime: bad frame from server", "err", ev.Err.Error())
	}
	s.emit(ev, false)
}

// emit delivers an event. Once Close has been called the consumer may have stopped reading, so
// events that do not fit are dropped instead of stalling the read loop.
func (s *session) emit(ev Event, last bool) {
	select {
	case s.events <- ev:
		return
	default:
	}
	select {
	case s.events <- ev:
	case <-s.closeCalled:
		select {
		case s.events <- ev:
		default:
			if last {
				s.log.Debug("realtime: dropped final event, consumer gone")
			}
		}
	}
}

// writeLoop is the only writer of messages: it sleeps until the queue has work or watchLoop
// says a ping is due.
func (s *session) writeLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.wake:
			for {
				m, ok := s.next()
				if !ok {
					break
				}
				if !s.write(m) {
					return
				}
			}
		case <-s.pingDue:
			if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(s.cfg.WriteTimeout)); err != nil {
				s.end(&Error{Class: ClassRetryable, Code: CodeWriteFailed, Err: err,
					Message: fmt.Sprintf("ping %s", s.cfg.redactedEndpoint())}, "", "")
				return
			}
		case <-s.done:
			return
		}
	}
}

// watchLoop keeps the link honest: a ping (by the writer) once the server has been silent for
// PingInterval (none while it answers the stream), the link declared dead when nothing — no
// frame, no pong — came for DeadLinkTimeout, and a write that has not ended within
// WriteTimeout given up. While the server speaks and writes go out, neither timer ever
// expires. A tick may be stale (the timer was pushed back meanwhile): each is checked against
// the clock first.
func (s *session) watchLoop() {
	defer s.wg.Done()
	defer s.silence.Close()
	defer s.stall.Close()
	// pingAt is our last ping, since born (0: none yet; any expiry is PingInterval or more in).
	var pingAt time.Duration
	for {
		select {
		case <-s.silence.C:
			now := time.Duration(s.since())
			heard := time.Duration(s.heardAt.Load())
			if silent := now - heard; silent < s.cfg.PingInterval {
				s.silence.Reset(s.cfg.PingInterval - silent)
				continue
			}
			alive := max(heard, time.Duration(s.pongAt.Load()))
			if now-alive >= s.cfg.DeadLinkTimeout {
				// Ended from here, not by a deadline for the reader: a reader held up by a slow
				// consumer would not see one, and a write stuck behind the dead link would stay.
				s.end(s.deadLinkError(os.ErrDeadlineExceeded), "", "")
				return
			}
			if now-pingAt >= s.cfg.PingInterval || pingAt < heard {
				// The writer sends it: this loop never waits on the socket, so that a write
				// stuck behind a dead link cannot hold off the checks.
				select {
				case s.pingDue <- struct{}{}:
				default:
				}
				pingAt = now
			}
			s.silence.Reset(min(pingAt+s.cfg.PingInterval, alive+s.cfg.DeadLinkTimeout) - now)
		case <-s.stall.C:
			began := s.writingSince.Load()
			if began == 0 {
				continue // the write ended meanwhile
			}
			if left := s.cfg.WriteTimeout - time.Duration(s.since()-began); left > 0 {
				s.stall.Reset(left)
				continue
			}
			s.end(s.writeError(os.ErrDeadlineExceeded), "", "")
			return
		case <-s.done:
			return
		}
	}
}

// next takes the oldest queued message for writing. Once Close has started, media and requests
// still queued are dropped: only the goodbye goes out.
func (s *session) next() (outMsg, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && !s.ended {
		m := s.queue[0]
		s.queue[0] = outMsg{}
		s.queue = s.queue[1:]
		close(s.room)
		s.room = make(chan struct{})
		if s.closing && !m.goodbye {
			continue
		}
		s.inflight = &m
		return m, true
	}
	return outMsg{}, false
}

// write writes one message (several when it is split); false when the session is over.
func (s *session) write(m outMsg) bool {
	typ := websocket.TextMessage
	if m.binary {
		typ = websocket.BinaryMessage
	}
	if m.media {
		s.growSendBuffer(len(m.data))
	}
	from := 0
	for i := 0; i <= len(m.splits); i++ {
		to := len(m.data)
		if i < len(m.splits) {
			to = m.splits[i]
		}
		if m.media && !s.waitHold() {
			return false
		}
		s.bytesSent.Add(uint64(to - from))
		s.writingSince.Store(s.since())
		s.stall.Reset(s.cfg.WriteTimeout)
		err := s.conn.WriteMessage(typ, m.data[from:to])
		s.writingSince.Store(0)
		s.stall.Stop()
		if err != nil {
			s.end(s.writeError(err), "", "")
			return false
		}
		from = to
	}
	if m.media {
		// Written: a later chunk's message is built in it (kept before the chunk can count
		// as delivered, so that a sender that waits for that finds it kept).
		s.bufs.spares.keep(m.data)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight = nil
	if m.media && !s.ended {
		s.track.written(m.id, s.wire.written.Load(), time.Now())
		s.track.settleNow(s.wire, s.cfg.DeadLinkTimeout)
	}
	return !s.ended
}

// maxRateLimitHold bounds one hold of media after a server's session.rate_limit: the server
// suggests tens of milliseconds; a nonsense value must not stall the link.
const maxRateLimitHold = time.Second

// waitHold sleeps while the server has asked us to hold media back; false when the session
// ended meanwhile.
func (s *session) waitHold() bool {
	wait := time.Until(time.Unix(0, s.holdMedia.Load()))
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// growSendBuffer keeps the socket's send buffer at about two of the largest media messages (the
// kernel doubles what is asked), never at the megabytes the kernel would grow it to by itself.
// It grows with a quarter's headroom: media messages vary (a chunk carries a JPEG whose size
// changes with every frame), and growing to each new largest one would make a system call
// (which wakes the Go runtime's monitor thread) every few chunks instead of a few a session.
func (s *session) growSendBuffer(size int) {
	if size <= s.sendBuffer {
		return
	}
	want := minSendBuffer
	if size > minSendBuffer {
		want = size + size/4
	}
	if c, ok := s.raw.(interface{ SetWriteBuffer(int) error }); ok && c.SetWriteBuffer(want) == nil {
		s.sendBuffer = want
	}
}

// heard notes that the server spoke on its own (a frame or a ping, not the pong to ours): no
// ping is due for PingInterval, and the link is alive.
func (s *session) heard() {
	s.heardAt.Store(s.since())
	s.silence.Reset(s.cfg.PingInterval)
}

// since is the time since the session was made, on the monotonic clock, in nanoseconds; never 0
// (writingSince's "none").
func (s *session) since() int64 { return max(int64(time.Since(s.born)), 1) }

// end records why the session ended (first call wins) and what the peer never got, says goodbye
// on the socket and closes it.
func (s *session) end(err *Error, reason, diag string) {
	s.endClosed(err, closedSignal{reason: reason, diagnostic: diag})
}

// endClosed is end with the server's session.closed, totals included.
func (s *session) endClosed(err *Error, c closedSignal) {
	s.endOnce.Do(func() {
		s.endErr, s.endReason, s.endDiag, s.endTotals = err, c.reason, c.diagnostic, c
		s.mu.Lock()
		unacked, known := s.track.settleNow(s.wire, s.cfg.DeadLinkTimeout)
		if err != nil { // after a clean Close the caller wants nothing back
			for _, c := range s.track.pending {
				s.undelivered = appendID(s.undelivered, c.id)
			}
			if s.inflight != nil && s.inflight.media {
				s.undelivered = appendID(s.undelivered, s.inflight.id)
			}
			for _, m := range s.queue {
				if m.media {
					s.undelivered = appendID(s.undelivered, m.id)
				}
			}
		}
		// Bytes the peer has not acknowledged must not arrive after they were reported lost.
		abort := err != nil && (unacked > 0 || !known && len(s.undelivered) > 0)
		s.ended, s.queue = true, nil
		s.mu.Unlock()
		close(s.done)
		if tc, ok := s.raw.(*net.TCPConn); ok && abort {
			_ = tc.SetLinger(0) // close resets the connection and drops what is unsent
		} else {
			code := websocket.CloseNormalClosure
			if err != nil && err.Class != ClassEnded {
				code = websocket.CloseGoingAway
			}
			_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""),
				time.Now().Add(200*time.Millisecond))
		}
		s.conn.Close()
		if err != nil {
			s.log.Debug("realtime: session ended", "code", err.Code, "err", err.Error())
		}
	})
}

func appendID(ids []uint64, id uint64) []uint64 {
	if id == 0 {
		return ids // untracked
	}
	return append(ids, id)
}

func (s *session) isDone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// readError classifies why reading stopped.
func (s *session) readError(err error) *Error {
	where := s.cfg.redactedEndpoint()
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code == websocket.CloseAbnormalClosure {
		// 1006 is never sent on the wire: the TCP connection ended without a close frame.
		return &Error{Class: ClassRetryable, Code: CodeLinkLost, Err: err,
			Message: fmt.Sprintf("connection to %s was cut (no close frame)", where)}
	}
	if errors.As(err, &ce) {
		e := &Error{Class: classifyCloseCode(ce.Code), Code: CodeWSClose, CloseCode: ce.Code, Err: err,
			Message: fmt.Sprintf("%s closed the connection with code %d: %s", where, ce.Code, closeCodeHint(ce.Code))}
		if ce.Text != "" {
			e.Message += fmt.Sprintf(" (%q)", ce.Text)
		}
		if se := s.lastServerErr.Load(); se != nil {
			// A gateway error just before the close says more than the close code.
			e.Code = se.Code
			e.Err = nil
			e.Message = fmt.Sprintf("%s refused the session with %s (%q) and closed the connection with code %d: %s",
				where, se.Code, strings.TrimPrefix(se.Message, "server error "+se.Code+": "), ce.Code, closeCodeHint(ce.Code))
			if ce.Code != websocket.ClosePolicyViolation {
				e.Class = classifyServerCode(se.Code)
				if e.Class == ClassProtocol {
					e.Class = ClassRetryable
				}
			}
		}
		if ce.Code == websocket.CloseMessageTooBig && !s.created.Load() {
			e.Class = ClassConfig
		}
		if !s.created.Load() && s.initSent.Load() && (ce.Code == websocket.CloseUnsupportedData) {
			return s.mismatch(e.Message)
		}
		return e
	}
	if errors.Is(err, websocket.ErrReadLimit) {
		return &Error{Class: ClassRetryable, Code: CodeFrameTooLarge, Err: err,
			Message: fmt.Sprintf("%s sent a frame larger than the %d-byte limit (max_frame_bytes)", where, s.cfg.MaxFrameBytes)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return s.deadLinkError(err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return &Error{Class: ClassRetryable, Code: CodeLinkLost, Err: err,
			Message: fmt.Sprintf("connection to %s was cut", where)}
	}
	return &Error{Class: ClassRetryable, Code: CodeLinkLost, Err: err,
		Message: fmt.Sprintf("read from %s", where)}
}

// writeError is how a failed write ends the session: the socket's error, or a write that did
// not end within WriteTimeout (watchLoop).
func (s *session) writeError(err error) *Error {
	return &Error{Class: ClassRetryable, Code: CodeWriteFailed, Err: err,
		Message: fmt.Sprintf("write to %s", s.cfg.redactedEndpoint())}
}

// deadLinkError is how a link that stayed silent for DeadLinkTimeout ends.
func (s *session) deadLinkError(err error) *Error {
	return &Error{Class: ClassRetryable, Code: CodeDeadLink, Err: err,
		Message: fmt.Sprintf("no data or pong from %s for %v: the link is dead", s.cfg.redactedEndpoint(), s.cfg.DeadLinkTimeout)}
}

// closedError classifies a session.closed from the server; a close we asked for is clean (nil).
func (s *session) closedError(reason, diag string) *Error {
	select {
	case <-s.closeCalled:
		return nil
	default:
	}
	if !s.created.Load() {
		// Before session.created this is no proof of anything but a server-side problem: a
		// current-dialect worker whose backend is down or busy answers exactly so. Retry later.
		msg := fmt.Sprintf("%s closed the session before session.created (reason %q", s.cfg.redactedEndpoint(), reason)
		if diag != "" {
			msg += ": " + diag
		}
		msg += ")"
		if reason == "backend_error" {
			msg += ": its backend is down or still busy with a previous session; will retry"
			if s.cfg.Dialect == DialectLegacy && s.initSent.Load() {
				msg += " (a current-dialect gateway answers a legacy session.update the same way: if this persists, check server.dialect)"
			}
		}
		return &Error{Class: ClassRetryable, Code: CodeSessionClosed, Reason: reason, Message: msg}
	}
	e := &Error{Class: classifyCloseReason(reason), Code: CodeSessionClosed, Reason: reason,
		Message: fmt.Sprintf("server closed the session: %s", reason)}
	if diag != "" {
		e.Message += " (" + diag + ")"
	}
	return e
}

// mismatch explains a refusal of our init, which in practice means the server speaks the other dialect.
func (s *session) mismatch(detail string) *Error {
	other := DialectLegacy
	if s.cfg.Dialect == DialectLegacy {
		other = DialectCurrent
	}
	return &Error{Class: ClassConfig, Code: CodeDialectMismatch,
		Message: fmt.Sprintf("%s refused the %s-dialect session init (%s): it speaks the %s dialect; set server.dialect: %s",
			s.cfg.redactedEndpoint(), s.cfg.Dialect, detail, other, other)}
}

// enqueue hands a message to the writer, waiting while the queue is full. Once Close has
// started only the goodbye is taken, and it never waits for room.
func (s *session) enqueue(ctx context.Context, m outMsg) error {
	for {
		s.mu.Lock()
		if s.ended || s.closing && !m.goodbye {
			s.mu.Unlock()
			return s.closedErr()
		}
		if len(s.queue) < s.cfg.SendQueue || m.goodbye {
			s.queue = append(s.queue, m)
			s.mu.Unlock()
			select {
			case s.wake <- struct{}{}:
			default:
			}
			return nil
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return s.closedErr()
		}
	}
}

// closedErr is ErrClosed, with why the session ended once it has. It reads ended under mu, not
// done: endClosed sets endErr before ended and closes done only after, and a Send or Ask that
// found the session ended in between reported a bare "session closed" (a gateway's early
// session.closed{backend_error} then reached `omnisat chat` without its reason).
func (s *session) closedErr() error {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended && s.endErr != nil {
		return fmt.Errorf("%w: %v", ErrClosed, s.endErr)
	}
	return ErrClosed
}

func asError(err error, doing string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Class: ClassRetryable, Code: CodeWriteFailed, Message: doing, Err: err}
}

func (s *session) Info() Info { return s.info }

func (s *session) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.track.settleNow(s.wire, s.cfg.DeadLinkTimeout)
	}
	return Stats{BytesSent: s.bytesSent.Load(), BytesReceived: s.bytesRecv.Load(), ChunksDelivered: s.track.delivered}
}

func (s *session) Events() <-chan Event  { return s.events }
func (s *session) Done() <-chan struct{} { return s.done }

// RecycleAudio implements AudioRecycler.
func (s *session) RecycleAudio(samples []float32) { s.bufs.samples.put(samples) }

func (s *session) Err() error {
	select {
	case <-s.done:
	default:
		return nil
	}
	if s.endErr == nil {
		return nil
	}
	return s.endErr
}

func (s *session) Send(ctx context.Context, c Chunk) error {
	if s.cfg.Mode == ModeChat && s.cfg.Dialect != DialectOpenVoice {
		return fmt.Errorf("send audio: a mode=chat session takes Ask, not media chunks")
	}
	m, err := s.codec.chunk(c, s.cfg.Init, s.bufs.spares.take())
	if err != nil {
		return err
	}
	m.media, m.id = true, c.ID
	return s.enqueue(ctx, m)
}

func (s *session) Ask(ctx context.Context, r ChatRequest) error {
	if s.cfg.Mode != ModeChat || s.cfg.Dialect != DialectCurrent {
		return fmt.Errorf("ask: needs a mode=chat session of the current dialect (this is %s/%s)", s.cfg.Dialect, s.cfg.Mode)
	}
	m, err := s.codec.chat(r)
	if err != nil {
		return err
	}
	return s.enqueue(ctx, m)
}

func (s *session) Speak(ctx context.Context, r Speech) (string, error) {
	m, id, err := s.codec.speak(r)
	if err != nil {
		return "", err
	}
	return id, s.enqueue(ctx, m)
}

func (s *session) CommitAudio(ctx context.Context) error {
	m, err := s.codec.commit()
	if err != nil {
		return err
	}
	return s.enqueue(ctx, m)
}

func (s *session) CancelSpeech(ctx context.Context) error {
	m, err := s.codec.cancelSpeech()
	if err != nil {
		return err
	}
	return s.enqueue(ctx, m)
}

func (s *session) Close(ctx context.Context, reason string) error {
	s.closeOnce.Do(func() { close(s.closeCalled) })
	if s.isDone() {
		s.wg.Wait()
		return nil
	}
	if reason == "" {
		reason = "user_stop"
	}
	s.mu.Lock()
	first := !s.closing
	s.closing = true // from here on Send and friends fail, and queued media is dropped
	close(s.room)    // a Send waiting for room learns it now
	s.room = make(chan struct{})
	s.mu.Unlock()
	wait, cancel := context.WithTimeout(ctx, s.cfg.CloseTimeout)
	defer cancel()
	goodbye, hasGoodbye := s.codec.closeMsg(reason)
	if first && hasGoodbye { // one session.close, however many callers
		s.closeReason.Store(reason)
		goodbye.goodbye = true
		if err := s.enqueue(wait, goodbye); err != nil {
			hasGoodbye = false
		}
	}
	if hasGoodbye {
		select {
		case <-s.done:
		case <-wait.Done():
			s.log.Debug("realtime: no session.closed in time; dropping the link", "reason", reason)
		}
	}
	s.end(nil, reason, "")
	s.wg.Wait()
	return nil
}
