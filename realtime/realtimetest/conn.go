package realtimetest

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The transport of one connection, after gorilla/websocket's chat example: one goroutine
// reads, one writes, channels between them and the session goroutine. The reader queues
// client frames without bound (real servers process strictly in order and build a backlog
// rather than drop), so it keeps reading, and answering pings, while a step runs.

type frameOp int

const (
	opText   frameOp = iota
	opBinary         // binary frame
	opClose          // close frame with code and reason
	opDrop           // close the TCP connection without a close frame
	opStall          // stop writing; reader stops answering
)

type outFrame struct {
	op     frameOp
	typ    string // message type recorded in SessionRecord.Sent
	data   []byte
	code   int
	reason string
}

type inFrame struct {
	binary bool
	data   []byte
	at     time.Time
}

type wsConn struct {
	srv  *Server
	ws   *websocket.Conn
	rec  *SessionRecord
	dead time.Duration // no frame from the client for this long: drop it

	out        chan outFrame
	quit       chan struct{} // closed by the session to stop the writer
	writerDone chan struct{}
	readerDone chan struct{}
	readErr    error // valid after readerDone is closed

	inMu  sync.Mutex
	inQ   []inFrame
	inSig chan struct{} // capacity 1: the queue is not empty

	dlMu    sync.Mutex // orders deadline changes against stalling
	stalled bool

	closeSent bool // writer goroutine only: a close frame has been written
}

func newWSConn(srv *Server, ws *websocket.Conn, rec *SessionRecord) *wsConn {
	c := &wsConn{
		srv:        srv,
		ws:         ws,
		rec:        rec,
		dead:       srv.opts.PingInterval + srv.opts.PongTimeout,
		out:        make(chan outFrame, 64),
		quit:       make(chan struct{}),
		writerDone: make(chan struct{}),
		readerDone: make(chan struct{}),
		inSig:      make(chan struct{}, 1),
	}
	ws.SetReadLimit(srv.opts.ReadLimit)
	ws.SetPongHandler(func(string) error {
		c.extend()
		return nil
	})
	ws.SetPingHandler(func(data string) error {
		c.srv.update(func() { c.rec.ClientPings++ })
		if c.isStalled() {
			return nil
		}
		c.extend()
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.dead))
		var ne net.Error
		if err == nil || errors.Is(err, websocket.ErrCloseSent) || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})
	ws.SetCloseHandler(func(code int, _ string) error {
		if c.isStalled() {
			return nil
		}
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
		return nil
	})
	srv.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c
}

func (c *wsConn) isStalled() bool {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	return c.stalled
}

// extend pushes the read deadline out: the client showed it is alive.
func (c *wsConn) extend() {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	if !c.stalled {
		_ = c.ws.SetReadDeadline(time.Now().Add(c.dead))
	}
}

func (c *wsConn) stall() {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	c.stalled = true
	_ = c.ws.SetReadDeadline(time.Time{})
}

func (c *wsConn) readLoop() {
	defer c.srv.wg.Done()
	defer close(c.readerDone)
	c.extend()
	for {
		mt, data, err := c.ws.ReadMessage()
		if err != nil {
			c.readErr = err
			return
		}
		if c.isStalled() {
			continue // black hole
		}
		c.extend()
		typ := "binary"
		if mt == websocket.TextMessage {
			typ = peekType(data)
		}
		c.srv.record(func() { c.rec.Received = append(c.rec.Received, typ) })
		c.inMu.Lock()
		c.inQ = append(c.inQ, inFrame{binary: mt == websocket.BinaryMessage, data: data, at: time.Now()})
		c.inMu.Unlock()
		c.signal()
	}
}

func (c *wsConn) signal() {
	select {
	case c.inSig <- struct{}{}:
	default:
	}
}

// pop takes the oldest queued client frame.
func (c *wsConn) pop() (inFrame, bool) {
	c.inMu.Lock()
	if len(c.inQ) == 0 {
		c.inMu.Unlock()
		return inFrame{}, false
	}
	f := c.inQ[0]
	c.inQ[0] = inFrame{}
	c.inQ = c.inQ[1:]
	more := len(c.inQ) > 0
	c.inMu.Unlock()
	if more {
		c.signal()
	}
	return f, true
}

func (c *wsConn) writeLoop() {
	defer c.srv.wg.Done()
	defer close(c.writerDone)
	ping := time.NewTicker(c.srv.opts.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-c.quit: // flush what is queued, then stop
			for {
				select {
				case f := <-c.out:
					if !c.write(f) {
						return
					}
				default:
					return
				}
			}
		case <-ping.C:
			if c.isStalled() || c.closeSent {
				continue // no pings into a black hole or after the close frame
			}
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.dead)); err != nil {
				return
			}
		case f := <-c.out:
			if !c.write(f) {
				return
			}
		}
	}
}

// write performs one queued operation; false when the writer must stop.
func (c *wsConn) write(f outFrame) bool {
	if c.isStalled() {
		return true // black hole
	}
	switch f.op {
	case opText, opBinary:
		mt := websocket.TextMessage
		if f.op == opBinary {
			mt = websocket.BinaryMessage
		}
		c.srv.record(func() { c.rec.Sent = append(c.rec.Sent, f.typ) })
		_ = c.ws.SetWriteDeadline(time.Now().Add(c.dead))
		if err := c.ws.WriteMessage(mt, f.data); err != nil {
			return false
		}
	case opClose:
		reason := f.reason
		if len(reason) > 120 {
			reason = reason[:120]
		}
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(f.code, reason), time.Now().Add(time.Second))
		c.closeSent = true
	case opDrop:
		_ = c.ws.NetConn().Close()
		return false
	case opStall:
		c.stall()
	}
	return true
}

// send queues a frame for the writer; false if the writer has gone or the server is closing.
func (c *wsConn) send(f outFrame) bool {
	select {
	case c.out <- f:
		return true
	case <-c.writerDone:
		return false
	case <-c.srv.ctx.Done():
		return false
	}
}

// teardown lets the writer flush what is queued (for at most flush), closes the
// socket and waits for both goroutines.
func (c *wsConn) teardown(flush time.Duration) {
	close(c.quit)
	t := time.NewTimer(flush)
	select {
	case <-c.writerDone:
	case <-t.C:
	}
	t.Stop()
	_ = c.ws.Close()
	<-c.writerDone
	<-c.readerDone
}
