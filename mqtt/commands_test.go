package mqtt

import (
	"strings"
	"testing"

	"github.com/omnisat/omnisat/agent"
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		name, payload string
		want          command
		err           string
	}{
		{"session", "Start", command{name: "session", session: "start"}, ""},
		{"session", "pause", command{}, "not one of start, stop, restart"},
		{"interrupt", "", command{name: "interrupt"}, ""},
		{"mute", "on", command{name: "mute", on: true}, ""},
		{"camera", "OFF", command{name: "camera"}, ""},
		{"volume", "0", command{name: "volume"}, ""},
		{"volume", "99.6", command{name: "volume", volume: 100}, ""},
		{"volume", "NaN", command{}, "not a number"},
		{"volume", "-1", command{}, "outside 0..100"},
		{"instructions", `{"text":"x"}`, command{name: "instructions", text: "x"}, ""},
		{"instructions", `{"text":"x"} {}`, command{}, "trailing data"},
		{"instructions", `{"restart":true}`, command{}, `no "text"`},
		{"ask", `{"id":7,"question":"q"}`, command{name: "ask", id: "7", text: "q"}, ""},
		{"ask", `{"id":[1],"question":"q"}`, command{}, "string or a number"},
		{"ask", `{"question":"q","max_new_tokens":9000}`, command{}, "outside 1..8192"},
		{"ask", `{"question":"q","voice":"anna"}`, command{}, "voice"},
		{"ask", `{"text":"q"}`, command{}, `takes "question"`},
		{"say", `{"text":"hi","snapshot":true}`, command{}, "no \"snapshot\""},
		{"say", `{"text":"hi","max_new_tokens":32,"thinking":true,"voice":"v1"}`,
			command{name: "say", text: "hi", turn: agent.TurnOptions{MaxNewTokens: 32, Thinking: true, Voice: "v1"}}, ""},
		{"settings", "reset", command{name: "settings"}, ""},
		{"settings", "forget", command{}, "not reset"},
		{"say", "\xff", command{}, "not UTF-8"},
		{"say", strings.Repeat("a", maxCommandBytes+1), command{}, "larger than"},
	} {
		got, err := parseCommand(tc.name, []byte(tc.payload))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %q: error %v, want %q", tc.name, tc.payload, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %q: %+v, %v; want %+v", tc.name, tc.payload, got, err, tc.want)
		}
	}
}

func FuzzParseCommand(f *testing.F) {
	for _, n := range commandNames {
		f.Add(n, "ON")
	}
	f.Add("ask", `{"id":"a","question":"b","snapshot":true}`)
	f.Add("instructions", `{"text":"b","restart":true}`)
	f.Add("volume", "1e3")
	f.Add("say", `{"id":1,"text":"b","voice":"v","max_new_tokens":5,"thinking":true}`)
	f.Fuzz(func(t *testing.T, name, payload string) {
		c, err := parseCommand(name, []byte(payload))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if c.name != name {
			t.Fatalf("name %q → %q", name, c.name)
		}
		if c.turn.MaxNewTokens < 0 || c.turn.MaxNewTokens > maxNewTokens {
			t.Fatalf("max_new_tokens %d accepted from %q", c.turn.MaxNewTokens, payload)
		}
		if name == "volume" && (c.volume < 0 || c.volume > 100) {
			t.Fatalf("volume %d accepted from %q", c.volume, payload)
		}
		if (name == "say" || name == "ask" || name == "instructions") && strings.TrimSpace(c.text) == "" {
			t.Fatalf("empty text accepted for %s from %q", name, payload)
		}
	})
}
