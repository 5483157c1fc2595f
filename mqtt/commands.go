package mqtt

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/omnisat/omnisat/agent"
)

// maxCommandBytes bounds a command payload (instructions are the longest).
const maxCommandBytes = 64 << 10

// command is a decoded, valid command: applying it is the only effect it has.
type command struct {
	name    string
	session string // start, stop, restart
	on      bool   // mute, camera
	volume  int
	text    string // instructions, say, ask question
	restart bool   // instructions
	id      string // ask, say (empty: the bridge assigns one)
	turn    agent.TurnOptions
}

// commandNames are the topics under <prefix>/cmd/.
var commandNames = []string{"session", "interrupt", "mute", "camera", "volume", "instructions", "settings", "say", "ask"}

// maxNewTokens bounds max_new_tokens (MiniCPM-o's context is 8192 tokens).
const maxNewTokens = 8192

// turnJSON is the JSON form of ask and say.
type turnJSON struct {
	ID           any     `json:"id"`
	Question     *string `json:"question"` // ask
	Text         *string `json:"text"`     // say
	Snapshot     bool    `json:"snapshot"`
	MaxNewTokens int     `json:"max_new_tokens"`
	Thinking     bool    `json:"thinking"`
	Voice        string  `json:"voice"`
}

// parseTurn decodes ask and say: plain text, or JSON with an id and the chat options.
func parseTurn(c *command, s string) error {
	field, shape := "text", `{"id": "...", "text": "...", "voice": "...", "max_new_tokens": 64, "thinking": false}`
	if c.name == "ask" {
		field, shape = "question", `{"id": "...", "question": "...", "snapshot": false, "max_new_tokens": 64, "thinking": false}`
	}
	if !strings.HasPrefix(s, "{") {
		if s == "" {
			return fmt.Errorf("empty %s: send text or %s", field, shape)
		}
		c.text = s
		return nil
	}
	var in turnJSON
	if err := decodeStrict(s, &in); err != nil {
		return fmt.Errorf("not valid JSON %s: %v", shape, err)
	}
	text, other := in.Text, in.Question
	if c.name == "ask" {
		text, other = in.Question, in.Text
	}
	if other != nil {
		return fmt.Errorf(`JSON payload of %s takes "%s", not the other field`, c.name, field)
	}
	if text == nil || strings.TrimSpace(*text) == "" {
		return fmt.Errorf(`JSON payload has no "%s" (or it is empty)`, field)
	}
	switch id := in.ID.(type) {
	case nil:
	case string:
		c.id = id
	case float64:
		c.id = strconv.FormatFloat(id, 'f', -1, 64)
	default:
		return errors.New(`"id" must be a string or a number`)
	}
	if len(c.id) > 200 {
		return fmt.Errorf(`"id" of %d bytes is longer than 200`, len(c.id))
	}
	if in.MaxNewTokens < 0 || in.MaxNewTokens > maxNewTokens {
		return fmt.Errorf(`"max_new_tokens" %d is outside 1..%d`, in.MaxNewTokens, maxNewTokens)
	}
	if c.name == "say" && in.Snapshot {
		return errors.New(`say takes no "snapshot"`)
	}
	if c.name == "ask" && in.Voice != "" {
		return errors.New(`ask answers in text: "voice" applies to say`)
	}
	if len(in.Voice) > 200 {
		return fmt.Errorf(`"voice" of %d bytes is longer than 200`, len(in.Voice))
	}
	c.text = strings.TrimSpace(*text)
	c.turn = agent.TurnOptions{Snapshot: in.Snapshot, MaxNewTokens: in.MaxNewTokens, Thinking: in.Thinking, Voice: in.Voice}
	return nil
}

// parseCommand decodes the payload of <prefix>/cmd/<name>. It never panics; errors say what is
// wrong with the payload and what would have been accepted.
func parseCommand(name string, payload []byte) (command, error) {
	c := command{name: name}
	if len(payload) > maxCommandBytes {
		return c, fmt.Errorf("payload of %d bytes is larger than %d", len(payload), maxCommandBytes)
	}
	if !utf8.Valid(payload) {
		return c, errors.New("payload is not UTF-8 text")
	}
	s := strings.TrimSpace(string(payload))
	switch name {
	case "session":
		switch strings.ToLower(s) {
		case "start", "stop", "restart":
			c.session = strings.ToLower(s)
		default:
			return c, fmt.Errorf("%s is not one of start, stop, restart", quote(s))
		}
	case "interrupt":
		// Any payload (Home Assistant's button sends PRESS).
	case "mute", "camera":
		on, err := parseOnOff(s)
		if err != nil {
			return c, err
		}
		c.on = on
	case "volume":
		v, err := parseVolume(s)
		if err != nil {
			return c, err
		}
		c.volume = v
	case "instructions":
		if strings.HasPrefix(s, "{") {
			var in struct {
				Text    *string `json:"text"`
				Restart bool    `json:"restart"`
			}
			if err := decodeStrict(s, &in); err != nil {
				return c, fmt.Errorf(`not valid JSON {"text": "...", "restart": true}: %v`, err)
			}
			if in.Text == nil {
				return c, errors.New(`JSON payload has no "text"`)
			}
			c.text, c.restart = *in.Text, in.Restart
		} else {
			c.text = s
		}
		if strings.TrimSpace(c.text) == "" {
			return c, errors.New("empty instructions")
		}
	case "settings":
		if strings.ToLower(s) != "reset" {
			return c, fmt.Errorf("%s is not reset", quote(s))
		}
	case "say", "ask":
		if err := parseTurn(&c, s); err != nil {
			return c, err
		}
	default:
		return c, fmt.Errorf("unknown command %s (known: %s)", quote(name), strings.Join(commandNames, ", "))
	}
	return c, nil
}

func decodeStrict(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func parseOnOff(s string) (bool, error) {
	switch strings.ToUpper(s) {
	case "ON", "TRUE", "1":
		return true, nil
	case "OFF", "FALSE", "0":
		return false, nil
	}
	return false, fmt.Errorf("%s is not ON or OFF", quote(s))
}

// parseVolume accepts 0..100; Home Assistant's number entity may send "40.0".
func parseVolume(s string) (int, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s is not a number 0..100", quote(s))
	}
	if f < 0 || f > 100 {
		return 0, fmt.Errorf("%s is outside 0..100", quote(s))
	}
	return int(math.Round(f)), nil
}

// quote shows a payload in an error message, shortened.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

// errorMessage is the payload of <prefix>/error.
type errorMessage struct {
	Topic   string `json:"topic"`
	Payload string `json:"payload"`
	Error   string `json:"error"`
	At      string `json:"at"`
}

// apply runs a decoded command on the agent. Only volume can fail (no volume control).
func (c command) apply(a Agent) error {
	switch c.name {
	case "session":
		switch c.session {
		case "start":
			a.Start()
		case "stop":
			a.Stop()
		case "restart":
			a.Restart()
		}
	case "interrupt":
		a.Interrupt()
	case "mute":
		a.Mute(c.on)
	case "camera":
		a.Camera(c.on)
	case "volume":
		return a.SetVolume(c.volume)
	case "instructions":
		a.SetInstructions(c.text, c.restart)
	case "settings":
		a.ResetSettings()
	case "say":
		a.Say(c.id, c.text, c.turn)
	case "ask":
		a.Ask(c.id, c.text, c.turn)
	}
	return nil
}
