package realtime

import (
	"errors"
	"fmt"
	"strings"
)

// Class tells a caller what to do about an error.
type Class int

const (
	// ClassRetryable: the server is busy or unreachable, or the link broke. Try again with backoff.
	ClassRetryable Class = iota
	// ClassConfig: retrying will not help (bad mode, auth refused, wrong dialect, bad URL).
	ClassConfig
	// ClassEnded: the server ended the session in the normal course (time limit, full context, a
	// requested stop). A new session may start at once.
	ClassEnded
	// ClassProtocol: one bad frame or a recoverable server error; the session goes on.
	ClassProtocol
)

func (c Class) String() string {
	switch c {
	case ClassRetryable:
		return "retryable"
	case ClassConfig:
		return "config"
	case ClassEnded:
		return "ended"
	case ClassProtocol:
		return "protocol"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Codes set by this package (server codes such as queue_full are passed through as sent).
const (
	CodeConfig          = "config"           // the Config is invalid
	CodeDial            = "dial"             // TCP/TLS/handshake failed
	CodeHandshake       = "handshake_status" // the HTTP upgrade was refused with a status
	CodeDeadLink        = "dead_link"        // nothing heard within DeadLinkTimeout
	CodeLinkLost        = "link_lost"        // the connection broke without a close frame
	CodeWSClose         = "ws_close"         // the server closed the WebSocket (see CloseCode)
	CodeFrameTooLarge   = "frame_too_large"  // a frame over MaxFrameBytes
	CodeInvalidJSON     = "invalid_json"     // a text frame that is not JSON
	CodeBadField        = "bad_field"        // a field that cannot be decoded (base64, float32 length, ...)
	CodeDialectMismatch = "dialect_mismatch" // the server answered in the other dialect
	CodeInitTimeout     = "init_timeout"     // no session.created within InitTimeout
	CodeSessionClosed   = "session_closed"   // session.closed from the server (see Reason)
	CodeClosed          = "closed"           // the session was closed by us
	CodeWriteFailed     = "write_failed"     // a frame could not be written
	CodeEmptyReply      = "empty_reply"      // a turn ended with neither text nor audio
	CodeSpeechCancelled = "speech_cancelled" // OpenVoice ended a synthesis as cancelled
)

// Error is what every failure of this package is. Use errors.As to read it, or ClassOf.
type Error struct {
	Class     Class
	Code      string // a server code (queue_full, worker_busy, ...) or one of the Code* constants
	Message   string // a sentence a person can act on
	CloseCode int    // the WebSocket close code, when the end came as one
	Reason    string // session.closed reason, when the end came as one
	Event     string // the offending server event type, for protocol errors
	Err       error  // the underlying error, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Event != "" {
		fmt.Fprintf(&b, " (event %s)", e.Event)
	}
	if e.Err != nil && !strings.Contains(e.Message, e.Err.Error()) {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns the class of err; errors not from this package count as retryable.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ClassRetryable
}

// ErrClosed is returned by Send and friends once the session has ended.
var ErrClosed = errors.New("realtime: session closed")

// classifyServerCode maps an `error.code` from the gateway to a class.
func classifyServerCode(code string) Class {
	switch code {
	case "queue_full", "worker_busy", "service_unavailable", "worker_connect_failed", "session_failed":
		return ClassRetryable
	case "inference_failed", "inference_error", "not_ready", "unknown_event", "missing_field", "invalid_payload", "invalid_event":
		return ClassProtocol
	case "unauthorized", "forbidden", "auth_failed", "invalid_api_key", "chat_disabled", "invalid_mode":
		return ClassConfig
	}
	return ClassRetryable
}

// classifyCloseReason maps a session.closed reason to a class.
func classifyCloseReason(reason string) Class {
	switch reason {
	case "timeout", "context_full", "user_stop", "client_closed", "stopped", "server_shutdown", "turn_done",
		"inactivity_timeout", "client_request", "cancelled": // the last three: OpenVoice
		return ClassEnded
	}
	// backend_error, error and anything unknown: something went wrong server-side; back off.
	return ClassRetryable
}

// classifyCloseCode maps a WebSocket close code to a class.
func classifyCloseCode(code int) Class {
	switch code {
	case 1008: // policy: bad mode, chat disabled
		return ClassConfig
	case 1000, 1001:
		return ClassEnded
	}
	// 1013 try again later, 1009 too big, 1011 server error, 1006 abnormal ...
	return ClassRetryable
}

func closeCodeHint(code int) string {
	switch code {
	case 1008:
		return "the server refused the session by policy (unknown mode, chat disabled, or a missing parameter)"
	case 1013:
		return "the server is busy (no worker or queue full); try again later"
	case 1009:
		return "a frame was too large for the server"
	case 1003:
		return "the server could not read a frame as JSON"
	case 1011:
		return "the server hit an internal error"
	case 1000, 1001:
		return "the server ended the connection"
	}
	return "the connection was closed"
}
