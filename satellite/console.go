package satellite

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/omnisat/omnisat/agent"
)

// printEvents writes the agent's events as readable lines: state changes, the assistant's text
// as it streams, transcripts, lifecycle events and answers. Lines start with the time when
// stamp is set (not in the journal, which stamps them itself).
func printEvents(w io.Writer, events <-chan agent.Event, stamp bool) {
	streaming := false
	now := func() string {
		if stamp {
			return time.Now().Format("15:04:05") + " "
		}
		return ""
	}
	line := func(format string, a ...any) {
		if streaming {
			fmt.Fprintln(w)
			streaming = false
		}
		fmt.Fprintf(w, now()+format+"\n", a...)
	}
	last := agent.State("")
	for ev := range events {
		switch ev := ev.(type) {
		case agent.StateChanged:
			st := ev.Status
			if st.State == last && st.State != agent.StateQueued {
				continue
			}
			last = st.State
			detail := st.Detail
			if st.State == agent.StateListening && st.SessionID != "" {
				detail = "session " + st.SessionID
			}
			if st.State == agent.StateReconnecting && !st.NextAttempt.IsZero() {
				detail += fmt.Sprintf(" (next attempt in %v)", time.Until(st.NextAttempt).Round(time.Millisecond))
			}
			line("state %s %s", st.State, detail)
		case agent.TextDelta:
			if !streaming {
				fmt.Fprint(w, now()+"assistant: ")
				streaming = true
			}
			fmt.Fprint(w, ev.Text)
		case agent.Utterance:
			if ev.Role == "assistant" {
				if streaming {
					fmt.Fprintln(w)
					streaming = false
				}
				continue
			}
			if !ev.Partial {
				line("user: %s", ev.Text)
			}
		case agent.Lifecycle:
			line("%s %s %s", strings.ReplaceAll(ev.Kind, "_", " "), ev.SessionID, ev.Reason)
		case agent.Answer:
			if ev.Error != "" {
				line("answer %s failed: %s", ev.ID, ev.Error)
			} else {
				line("answer %s: %s", ev.ID, ev.Text)
			}
		}
	}
	if streaming {
		fmt.Fprintln(w)
	}
}
