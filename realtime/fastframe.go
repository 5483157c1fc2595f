package realtime

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Every server frame is first read by a scanner made for miniFrame, and only a frame it cannot
// be sure of goes to encoding/json. Through encoding/json a frame costs reflection, a string
// per field and, for reply audio (~128 KB of base64 in one JSON string a second), a scan of the
// string byte by byte, a copy of it and a decode of the copy. The scanner instead decodes the
// audio straight into a sample buffer, keeps the frame's strings without allocating where it
// has seen them before (event types, the session's and response's ids), and allocates nothing
// else: a second of streaming costs a few microseconds of decoding instead of hundreds.
//
// It takes a frame exactly as encoding/json would fill a miniFrame, or not at all: the whole
// frame is checked as JSON, member names match without case (ASCII only), null leaves a value
// or clears a pointer, a number is checked as JSON before strconv reads it, strings are
// unescaped with encoding/json's rules (\u escapes, surrogate pairs, invalid UTF-8 replaced by
// U+FFFD). Whatever it does not handle the same way for certain it leaves to encoding/json: a
// member twice (under any case), a name with escapes or beyond ASCII, a value of the wrong type,
// a number out of range, escapes in the audio, audio that is not valid base64, nesting deeper
// than maxScanDepth, and the rare members diagnostic and error. FuzzFastFrame holds both
// decoders to the same events for any input.

// maxScanDepth bounds the nesting the scanner follows inside members it skips; encoding/json
// allows 10000 and words the error beyond.
const maxScanDepth = 100

// fastFrame decodes data on the fast path into the codec's scratch frame (valid until the next
// call); ok is false when the general decoder must decide.
func (c *miniCPM) fastFrame(data []byte) (*miniFrame, bool) {
	c.frame, c.metrics, c.seen = miniFrame{}, wireMetrics{}, 0
	s := scanner{data: data}
	if !s.object(c.frameMember) {
		return nil, false
	}
	if s.skipSpace(); s.i != len(data) {
		return nil, false // anything after the object
	}
	return &c.frame, true
}

// Field bits, to refuse a member that appears twice.
const (
	fType uint32 = 1 << iota
	fPosition
	fEstimatedWait
	fTicket
	fQueueLength
	fSessionID
	fMode
	fMetrics
	fSendTS
	fReason
	fKind
	fResponseID
	fText
	fAudio
	fEndOfTurn
	fKVCache
)

// frameMember decodes one member of a frame; false when the general decoder must decide.
func (c *miniCPM) frameMember(s *scanner, name []byte) bool {
	f := &c.frame
	var lower [24]byte
	key, ok := foldASCII(lower[:0], name)
	if !ok {
		return false
	}
	var bit uint32
	switch string(key) {
	case "type":
		bit = fType
	case "position":
		bit = fPosition
	case "estimated_wait_s":
		bit = fEstimatedWait
	case "ticket_id":
		bit = fTicket
	case "queue_length":
		bit = fQueueLength
	case "session_id":
		bit = fSessionID
	case "mode":
		bit = fMode
	case "metrics":
		bit = fMetrics
	case "server_send_ts":
		bit = fSendTS
	case "reason":
		bit = fReason
	case "kind":
		bit = fKind
	case "response_id":
		bit = fResponseID
	case "text":
		bit = fText
	case "audio":
		bit = fAudio
	case "end_of_turn":
		bit = fEndOfTurn
	case "kv_cache_length":
		bit = fKVCache
	case "diagnostic", "error":
		return false // rare frames: encoding/json's exact treatment is simpler to keep
	default:
		return s.skipValue(0)
	}
	if c.seen&bit != 0 {
		return false
	}
	c.seen |= bit
	switch bit {
	case fType:
		return s.stringInto(&f.Type, internEventType)
	case fPosition:
		return s.floatInto(&f.Position)
	case fEstimatedWait:
		return s.floatInto(&f.EstimatedWaitS)
	case fTicket:
		return s.stringInto(&f.TicketID, nil)
	case fQueueLength:
		return s.floatInto(&f.QueueLength)
	case fSessionID:
		return s.stringInto(&f.SessionID, c.lastSessionID.intern)
	case fMode:
		return s.stringInto(&f.Mode, nil)
	case fMetrics:
		return c.metricsMember(s)
	case fSendTS:
		return s.floatInto(&f.ServerSendTS)
	case fReason:
		return s.stringInto(&f.Reason, nil)
	case fKind:
		return s.stringInto(&f.Kind, internKind)
	case fResponseID:
		return s.stringInto(&f.ResponseID, c.lastResponseID.intern)
	case fText:
		return s.stringPtrInto(&f.Text, &c.text)
	case fAudio:
		return c.audioMember(s)
	case fEndOfTurn:
		return s.boolInto(&f.EndOfTurn)
	case fKVCache:
		return s.floatPtrInto(&f.KVCacheLength, &c.kvCache)
	}
	return false
}

// metricsMember decodes the metrics object into the codec's scratch metrics.
func (c *miniCPM) metricsMember(s *scanner) bool {
	if s.null() {
		c.frame.Metrics = nil
		return true
	}
	m := &c.metrics
	var seen uint32
	ok := s.object(func(s *scanner, name []byte) bool {
		var lower [24]byte
		key, ok := foldASCII(lower[:0], name)
		if !ok {
			return false
		}
		bit, dst, known := metricMember(m, key)
		if !known {
			return s.skipValue(1)
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if dst == nil {
			return s.stringInto(&m.Backend, c.lastBackend.intern)
		}
		return s.floatInto(dst)
	})
	if ok {
		c.frame.Metrics = m
	}
	return ok
}

// metricMember names the field of m a lower-cased metrics member goes to, and its bit in the
// duplicate check; dst is nil for backend, the one string.
func metricMember(m *wireMetrics, key []byte) (bit uint32, dst *float64, known bool) {
	names := [...]string{"kv_cache_length", "backend", "prefill_ms", "generate_ms", "wall_clock_ms",
		"n_tokens", "n_tts_tokens", "vision_slices", "vision_tokens", "chunk_index"}
	fields := [...]*float64{&m.KVCacheLength, nil, &m.PrefillMS, &m.GenerateMS, &m.WallClockMS,
		&m.NTokens, &m.NTTSTokens, &m.VisionSlices, &m.VisionTokens, &m.ChunkIndex}
	for i, name := range names {
		if string(key) == name {
			return 1 << i, fields[i], true
		}
	}
	return 0, nil, false
}

// audioMember decodes the audio string straight into samples. Escapes (never seen in base64)
// and base64 errors go to the general decoder, which words the error. Control characters,
// which JSON forbids in a string, need no pass of their own here: base64 refuses them all but
// the line breaks it skips, which plainStr refuses.
func (c *miniCPM) audioMember(s *scanner) bool {
	if s.null() {
		c.frame.fastAudio = nil
		return true
	}
	raw, ok := s.plainStr()
	if !ok {
		return false
	}
	samples, err := decodeFloat32Base64Into(c.samples, raw)
	if err != nil {
		return false
	}
	c.audio = decodedAudio{samples: samples, size: len(raw)}
	c.frame.fastAudio = &c.audio
	return true
}

// internEventType returns the frame types servers send without allocating.
func internEventType(b []byte) string {
	switch string(b) {
	case "response.output.delta":
		return "response.output.delta"
	case "response.step.done":
		return "response.step.done"
	case "response.done":
		return "response.done"
	case "response.output_audio.delta":
		return "response.output_audio.delta"
	case "response.listen":
		return "response.listen"
	case "session.queue_update":
		return "session.queue_update"
	}
	return string(b)
}

// internKind returns the current dialect's delta kinds without allocating.
func internKind(b []byte) string {
	switch string(b) {
	case "listen":
		return "listen"
	case "audio":
		return "audio"
	case "text":
		return "text"
	case "audio_tokens":
		return "audio_tokens"
	}
	return string(b)
}

// lastString keeps the last value of a field that repeats from frame to frame (an id), so
// that the same bytes give the same string without allocating.
type lastString string

func (l *lastString) intern(b []byte) string {
	if string(b) != string(*l) {
		*l = lastString(b)
	}
	return string(*l)
}

// foldASCII appends name lower-cased to buf; false when it is not printable ASCII (a name
// encoding/json might match through Unicode folding).
func foldASCII(buf, name []byte) ([]byte, bool) {
	for _, b := range name {
		switch {
		case b < 0x20 || b > 0x7e:
			return nil, false
		case 'A' <= b && b <= 'Z':
			b += 'a' - 'A'
		}
		buf = append(buf, b)
	}
	return buf, true
}

// scanner reads JSON values from data at i, checking them as encoding/json's scanner does.
type scanner struct {
	data []byte
	i    int
}

func (s *scanner) skipSpace() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object reads an object, calling member for each member with the scanner at its value (the
// name's raw bytes; false when the name has escapes, so that member sees only plain names).
func (s *scanner) object(member func(s *scanner, name []byte) bool) bool {
	s.skipSpace()
	if s.i >= len(s.data) || s.data[s.i] != '{' {
		return false
	}
	s.i++
	s.skipSpace()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return true
	}
	for {
		s.skipSpace()
		name, escaped, ok := s.str()
		if !ok || escaped {
			return false
		}
		s.skipSpace()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return false
		}
		s.i++
		s.skipSpace()
		if !member(s, name) {
			return false
		}
		if more, ok := s.separator('}'); !more {
			return ok
		}
	}
}

// separator reads what follows a member or an element: a comma (more follows) or the
// closing byte; ok is false on anything else.
func (s *scanner) separator(closing byte) (more, ok bool) {
	s.skipSpace()
	if s.i >= len(s.data) {
		return false, false
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		return true, true
	case closing:
		s.i++
		return false, true
	}
	return false, false
}

// str reads a string and returns its raw contents (between the quotes) and whether they have
// escapes; ok is false when it is not a valid JSON string. A plain string (the long ones are
// base64) is checked with vector searches for its end and for a backslash, then eight bytes at
// a time for control characters; one with escapes is walked once.
func (s *scanner) str() (raw []byte, escaped, ok bool) {
	if s.i >= len(s.data) || s.data[s.i] != '"' {
		return nil, false, false
	}
	start := s.i + 1
	rest := s.data[start:]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false, false
	}
	if bytes.IndexByte(rest[:end], '\\') < 0 {
		if hasControl(rest[:end]) {
			return nil, false, false
		}
		s.i = start + end + 1
		return rest[:end], false, true
	}
	for j := 0; ; {
		for j < end {
			c := rest[j]
			switch {
			case c < 0x20:
				return nil, false, false
			case c != '\\':
				j++
				continue
			}
			if j+1 >= len(rest) {
				return nil, false, false
			}
			switch rest[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(rest) || !isHex4(rest[j+2:j+6]) {
					return nil, false, false
				}
				j += 6
			default:
				return nil, false, false
			}
		}
		if j == end {
			s.i = start + end + 1
			return rest[:end], true, true
		}
		// The escape before end took its quote (\"): the string goes on.
		next := bytes.IndexByte(rest[j:], '"')
		if next < 0 {
			return nil, false, false
		}
		end = j + next
	}
}

// plainStr reads a string without escapes whose contents are left to the caller to check for
// control characters other than line breaks; false for anything else.
func (s *scanner) plainStr() ([]byte, bool) {
	if s.i >= len(s.data) || s.data[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	end := bytes.IndexByte(s.data[start:], '"')
	if end < 0 {
		return nil, false
	}
	raw := s.data[start : start+end]
	if bytes.IndexByte(raw, '\\') >= 0 || bytes.IndexByte(raw, '\n') >= 0 || bytes.IndexByte(raw, '\r') >= 0 {
		return nil, false
	}
	s.i = start + end + 1
	return raw, true
}

// hasControl reports whether b holds a byte below 0x20 (not allowed raw in a JSON string),
// testing eight bytes at a time.
func hasControl(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if (x-ones*0x20)&^x&highs != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// null reads a null literal if one is next.
func (s *scanner) null() bool {
	if bytes.HasPrefix(s.data[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// stringInto reads a string (or null, which leaves dst) into dst; intern, when set, makes the
// string of plain bytes.
func (s *scanner) stringInto(dst *string, intern func([]byte) string) bool {
	if s.null() {
		return true
	}
	raw, escaped, ok := s.str()
	if !ok {
		return false
	}
	if !escaped && intern != nil && utf8.Valid(raw) {
		*dst = intern(raw)
		return true
	}
	*dst = unquote(raw, escaped)
	return true
}

// stringPtrInto reads a string into *box and points dst at it; null clears dst.
func (s *scanner) stringPtrInto(dst **string, box *string) bool {
	if s.null() {
		*dst = nil
		return true
	}
	raw, escaped, ok := s.str()
	if !ok {
		return false
	}
	*box = unquote(raw, escaped)
	*dst = box
	return true
}

func (s *scanner) floatInto(dst *float64) bool {
	if s.null() {
		return true
	}
	v, ok := s.number()
	if ok {
		*dst = v
	}
	return ok
}

func (s *scanner) floatPtrInto(dst **float64, box *float64) bool {
	if s.null() {
		*dst = nil
		return true
	}
	v, ok := s.number()
	if ok {
		*box = v
		*dst = box
	}
	return ok
}

func (s *scanner) boolInto(dst *bool) bool {
	switch {
	case s.null():
	case bytes.HasPrefix(s.data[s.i:], []byte("true")):
		s.i += 4
		*dst = true
	case bytes.HasPrefix(s.data[s.i:], []byte("false")):
		s.i += 5
		*dst = false
	default:
		return false
	}
	return true
}

// number reads a JSON number as a float64; false for anything else, or a number out of range
// (encoding/json reports both as errors).
func (s *scanner) number() (float64, bool) {
	end, ok := numberEnd(s.data, s.i)
	if !ok {
		return 0, false
	}
	var buf [32]byte
	lit := s.data[s.i:end]
	if len(lit) > len(buf) {
		return 0, false // no server sends such a number; let encoding/json judge it
	}
	v, err := strconv.ParseFloat(string(append(buf[:0], lit...)), 64)
	if err != nil {
		return 0, false
	}
	s.i = end
	return v, true
}

// numberEnd returns where the JSON number at data[i] ends: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func numberEnd(data []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
		return i
	}
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		i = digits(i)
	default:
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

// skipValue checks and skips any JSON value; depth counts the objects and arrays around it.
func (s *scanner) skipValue(depth int) bool {
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '{':
		if depth >= maxScanDepth {
			return false
		}
		return s.object(func(s *scanner, _ []byte) bool { return s.skipValue(depth + 1) })
	case c == '[':
		if depth >= maxScanDepth {
			return false
		}
		s.i++
		s.skipSpace()
		if s.i < len(s.data) && s.data[s.i] == ']' {
			s.i++
			return true
		}
		for {
			s.skipSpace()
			if !s.skipValue(depth + 1) {
				return false
			}
			if more, ok := s.separator(']'); !more {
				return ok
			}
		}
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		end, ok := numberEnd(s.data, s.i)
		s.i = end
		return ok
	}
}

func (s *scanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.data[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

// unquote turns a string's raw contents into its value as encoding/json does: escapes decoded
// (a lone or broken surrogate becomes U+FFFD) and invalid UTF-8 replaced by U+FFFD. raw has
// been checked by str.
func unquote(raw []byte, escaped bool) string {
	if !escaped && utf8.Valid(raw) {
		return string(raw)
	}
	out := make([]byte, 0, len(raw)+2*utf8.UTFMax)
	for r := 0; r < len(raw); {
		c := raw[r]
		switch {
		case c == '\\':
			switch e := raw[r+1]; e {
			case 'u':
				rr := hex4(raw[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(raw) && raw[r] == '\\' && raw[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(raw[r+2:])); dec != utf8.RuneError {
							r += 6
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
					rr = utf8.RuneError
				}
				out = utf8.AppendRune(out, rr)
				continue
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			default: // " \ /
				out = append(out, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			r++
		default:
			rr, size := utf8.DecodeRune(raw[r:])
			r += size
			out = utf8.AppendRune(out, rr)
		}
	}
	return string(out)
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
