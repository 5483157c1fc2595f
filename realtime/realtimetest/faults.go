package realtimetest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultKind names a misbehaviour the simulator can inject.
type FaultKind string

// Fault kinds.
const (
	FaultDrop        FaultKind = "drop"         // close the TCP connection abruptly (no close frame)
	FaultStall       FaultKind = "stall"        // black hole: read and write nothing, answer no pings, keep TCP open
	FaultInvalidJSON FaultKind = "invalid-json" // send a text frame that is not JSON, then carry on
	FaultOversize    FaultKind = "oversize"     // send one text frame of Size bytes (default 20 MiB), then carry on
	FaultBadDelta    FaultKind = "bad-delta"    // send an audio delta whose base64 is garbage, then carry on
	FaultClose       FaultKind = "close"        // send session.closed{reason: Reason} early
	FaultRefuse      FaultKind = "refuse"       // at connect: error{code: Code} then close 1013
	// FaultError sends an error event mid-session (Code, default inference_failed) and goes on;
	// with code session_failed (current) the gateway then gives the session up with close 1011.
	FaultError FaultKind = "error"
	// FaultBackendError answers the init with session.closed{session_id:null, reason:"backend_error"}
	// before session.created, as a current-dialect worker does whose backend is down or still busy.
	FaultBackendError FaultKind = "backend-error"
	// FaultStallInit answers nothing after session.queue_done (OpenVoice: never greets), only
	// WebSocket pings, until the session limit: a live gateway that ignores the client's init.
	FaultStallInit FaultKind = "stall-init"
)

// DefaultOversize is the size of the FaultOversize frame when Fault.Size is 0.
const DefaultOversize = 20 << 20

var faultKinds = []FaultKind{FaultDrop, FaultStall, FaultInvalidJSON, FaultOversize, FaultBadDelta, FaultClose, FaultRefuse,
	FaultBackendError, FaultStallInit, FaultError}

// atConnect reports whether the fault acts before session.created (not counted in chunks).
func (k FaultKind) atConnect() bool {
	return k == FaultRefuse || k == FaultBackendError || k == FaultStallInit
}

// Fault is one armed misbehaviour.
type Fault struct {
	Kind         FaultKind
	AfterAppends int    // fire once the session has accepted this many input chunks (chat: input.append); 0 = when the session is created; ignored for refuse
	Reason       string // FaultClose: session.closed reason (default "backend_error")
	Code         string // FaultRefuse: error code (default "worker_busy"); FaultError: default "inference_failed"
	Size         int    // FaultOversize: frame size in bytes (default DefaultOversize)
	Count        int    // how many sessions (connections for refuse) it fires on; 0 = every one
	// Delay: the fault fires this long after it is due (after=0: after session.created), e.g. a
	// server that ends every session 0.1 s after creating it. Not for the at-connect kinds.
	Delay time.Duration
	// KeepOpen (close): after session.closed the server leaves the socket open, as OpenVoice does
	// (and the legacy gateway after context_full): the client must close it.
	KeepOpen bool
}

// String returns the CLI form of f, which ParseFault accepts.
func (f Fault) String() string {
	var kv []string
	if f.AfterAppends != 0 {
		kv = append(kv, "after="+strconv.Itoa(f.AfterAppends))
	}
	if f.Reason != "" {
		kv = append(kv, "reason="+f.Reason)
	}
	if f.Code != "" {
		kv = append(kv, "code="+f.Code)
	}
	if f.Size != 0 {
		kv = append(kv, "size="+strconv.Itoa(f.Size))
	}
	if f.Count != 0 {
		kv = append(kv, "count="+strconv.Itoa(f.Count))
	}
	if f.Delay != 0 {
		kv = append(kv, "delay="+f.Delay.String())
	}
	if f.KeepOpen {
		kv = append(kv, "keep-open=true")
	}
	if len(kv) == 0 {
		return string(f.Kind)
	}
	return string(f.Kind) + ":" + strings.Join(kv, ",")
}

// Validate reports whether f is a fault the simulator can inject.
func (f Fault) Validate() error {
	known := false
	for _, k := range faultKinds {
		if f.Kind == k {
			known = true
		}
	}
	if !known {
		return fmt.Errorf("fault kind %q is unknown (want one of %s)", f.Kind, kindList())
	}
	if f.AfterAppends < 0 || f.Count < 0 || f.Size < 0 || f.Delay < 0 {
		return fmt.Errorf("fault %q: after, count, size and delay must not be negative", f.Kind)
	}
	if f.Kind.atConnect() && (f.AfterAppends != 0 || f.Delay != 0) {
		return fmt.Errorf("fault %q: acts at connect; after and delay do not apply", f.Kind)
	}
	if f.KeepOpen && f.Kind != FaultClose {
		return fmt.Errorf("fault %q: keep-open applies only to close", f.Kind)
	}
	if f.Reason != "" && f.Kind != FaultClose {
		return fmt.Errorf("fault %q: reason applies only to close", f.Kind)
	}
	if f.Code != "" && f.Kind != FaultRefuse && f.Kind != FaultError {
		return fmt.Errorf("fault %q: code applies only to refuse and error", f.Kind)
	}
	if f.Size != 0 && f.Kind != FaultOversize {
		return fmt.Errorf("fault %q: size applies only to oversize", f.Kind)
	}
	return nil
}

// validFor checks f and that a server of dialect d can play it.
func (f Fault) validFor(d Dialect) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Kind == FaultBackendError && d != Current {
		return fmt.Errorf("fault %q: only current-dialect chains answer an init with backend_error", f.Kind)
	}
	if f.Kind == FaultError && f.Code == "session_failed" && d != Current {
		return fmt.Errorf("fault %q: session_failed comes from current-dialect gateways only", f.Kind)
	}
	return nil
}

func kindList() string {
	s := make([]string, len(faultKinds))
	for i, k := range faultKinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// ParseFault parses the CLI form of a fault: KIND[:KEY=VALUE[,KEY=VALUE...]], for example
// "drop", "stall:after=3", "close:reason=timeout,after=2", "refuse:count=2,code=queue_full",
// "oversize:size=20000000", "close:reason=timeout,delay=100ms", "close:keep-open=true",
// "backend-error:count=3", "error:code=session_failed,after=2". Keys: after, count (non-negative
// integers), reason (close), code (refuse, error), size (oversize, bytes), delay (a duration),
// keep-open (close; true or false).
func ParseFault(s string) (Fault, error) {
	s = strings.TrimSpace(s)
	kind, rest, hasArgs := strings.Cut(s, ":")
	f := Fault{Kind: FaultKind(strings.TrimSpace(kind))}
	if f.Kind == "" {
		return Fault{}, fmt.Errorf("parse fault %q: missing kind (want one of %s)", s, kindList())
	}
	if hasArgs {
		if strings.TrimSpace(rest) == "" {
			return Fault{}, fmt.Errorf("parse fault %q: nothing after ':'", s)
		}
		seen := map[string]bool{}
		for _, part := range strings.Split(rest, ",") {
			key, val, ok := strings.Cut(part, "=")
			key, val = strings.TrimSpace(key), strings.TrimSpace(val)
			if !ok || key == "" {
				return Fault{}, fmt.Errorf("parse fault %q: %q is not key=value", s, part)
			}
			if seen[key] {
				return Fault{}, fmt.Errorf("parse fault %q: key %q given twice", s, key)
			}
			seen[key] = true
			switch key {
			case "after", "count", "size":
				n, err := strconv.Atoi(val)
				if err != nil || n < 0 {
					return Fault{}, fmt.Errorf("parse fault %q: %s=%q is not a non-negative integer", s, key, val)
				}
				switch key {
				case "after":
					f.AfterAppends = n
				case "count":
					f.Count = n
				default:
					f.Size = n
				}
			case "delay":
				d, err := time.ParseDuration(val)
				if err != nil || d < 0 {
					return Fault{}, fmt.Errorf("parse fault %q: delay=%q is not a non-negative duration", s, val)
				}
				f.Delay = d
			case "keep-open":
				b, err := strconv.ParseBool(val)
				if err != nil {
					return Fault{}, fmt.Errorf("parse fault %q: keep-open=%q is not true or false", s, val)
				}
				f.KeepOpen = b
			case "reason":
				if val == "" {
					return Fault{}, fmt.Errorf("parse fault %q: empty reason", s)
				}
				f.Reason = val
			case "code":
				if val == "" {
					return Fault{}, fmt.Errorf("parse fault %q: empty code", s)
				}
				f.Code = val
			default:
				return Fault{}, fmt.Errorf("parse fault %q: unknown key %q (want after, count, reason, code, size, delay or keep-open)", s, key)
			}
		}
	}
	if err := f.Validate(); err != nil {
		return Fault{}, fmt.Errorf("parse fault %q: %w", s, err)
	}
	return f, nil
}

// armedFault is a Fault plus how often it has fired.
type armedFault struct {
	Fault
	fired int
}

func (a *armedFault) available() bool { return a.Count == 0 || a.fired < a.Count }
