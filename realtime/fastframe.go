package realtime

import (
	"bytes"
	"encoding/json"
)

// The hot frames are reply audio: a second of it is ~128 KB of base64 in one JSON string. Run
// through encoding/json, that string is scanned byte by byte, copied into a Go string, then
// decoded into a byte slice and converted into samples. The fast path instead cuts the audio
// member out of the frame, decodes its base64 straight into the sample buffer, and leaves the
// few hundred bytes of the rest to encoding/json, so every other field keeps exactly the general
// decoder's meaning (names matched without case, duplicates, escapes, types, errors). Anything
// unusual about the frame's outline or the audio member sends the whole frame to the general
// decoder instead; FuzzFastFrame checks that both give the same events for any input.

// fastFrameMin is the smallest frame the fast path takes: below it encoding/json is as quick.
const fastFrameMin = 4096

// fastFrame decodes data on the fast path; ok is false when the general decoder must decide.
func (c *miniCPM) fastFrame(data []byte) (*miniFrame, bool) {
	rest, audio, ok := cutAudio(data, c.scratch[:0])
	if cap(rest) <= 64<<10 {
		c.scratch = rest[:0]
	}
	if !ok {
		return nil, false
	}
	samples, err := decodeFloat32Base64(audio)
	if err != nil {
		return nil, false // the general decoder words the error
	}
	f := &miniFrame{}
	if json.Unmarshal(rest, f) != nil || f.Audio != nil {
		return nil, false
	}
	f.fastAudio = &decodedAudio{samples: samples, size: len(audio)}
	return f, true
}

// cutAudio reads the outline of the JSON object in data: its members, in order, copied into buf
// except "audio", whose string value is returned as it stands. ok is false unless data is one
// object with exactly one "audio" member holding a plain string (no escapes), no other member
// whose name a decoder could take for "audio" (another case, escapes, non-ASCII), and nothing
// after it but whitespace. The members' values are not checked here: encoding/json does that
// when it decodes rest.
func cutAudio(data, buf []byte) (rest, audio []byte, ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return buf, nil, false
	}
	rest = append(buf, '{')
	i++
	found := false
	for n := 0; ; n++ {
		i = skipSpace(data, i)
		if n == 0 && i < len(data) && data[i] == '}' {
			i++
			break
		}
		keyStart := i
		keyEnd, plain := skipString(data, i)
		if keyEnd < 0 || !plain {
			return rest, nil, false
		}
		key := data[keyStart+1 : keyEnd-1]
		if !printableASCII(key) {
			return rest, nil, false
		}
		i = skipSpace(data, keyEnd)
		if i >= len(data) || data[i] != ':' {
			return rest, nil, false
		}
		i = skipSpace(data, i+1)
		switch {
		case string(key) == "audio":
			if found || i >= len(data) || data[i] != '"' {
				return rest, nil, false
			}
			end := bytes.IndexByte(data[i+1:], '"')
			if end < 0 {
				return rest, nil, false
			}
			audio = data[i+1 : i+1+end]
			// A backslash is an escape; raw line breaks are invalid JSON, which base64 would skip.
			if bytes.IndexByte(audio, '\\') >= 0 || bytes.IndexByte(audio, '\n') >= 0 || bytes.IndexByte(audio, '\r') >= 0 {
				return rest, nil, false
			}
			found = true
			i += end + 2
		case bytes.EqualFold(key, []byte("audio")):
			return rest, nil, false
		default:
			end := skipValue(data, i)
			if end < 0 {
				return rest, nil, false
			}
			if len(rest) > 1 {
				rest = append(rest, ',')
			}
			rest = append(rest, data[keyStart:keyEnd]...)
			rest = append(rest, ':')
			rest = append(rest, data[i:end]...)
			i = end
		}
		i = skipSpace(data, i)
		if i < len(data) && data[i] == ',' {
			i++
			continue
		}
		if i < len(data) && data[i] == '}' {
			i++
			break
		}
		return rest, nil, false
	}
	if skipSpace(data, i) != len(data) || !found {
		return rest, nil, false
	}
	return append(rest, '}'), audio, true
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at data[i] (-1 if there is none) and
// whether it had no escapes.
func skipString(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return -1, false
	}
	plain := true
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			plain = false
			j++
		case '"':
			return j + 1, plain
		}
	}
	return -1, false
}

// skipValue returns the index after the JSON value starting at data[i], by its outline only
// (strings, nesting), or -1.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		end, _ := skipString(data, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, _ := skipString(data, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i // a number or a literal: up to the next delimiter
	for ; j < len(data); j++ {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1
			}
			return j
		}
	}
	return j
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
