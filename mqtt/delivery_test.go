package mqtt_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/mqtt"
)

func utter(i int) agent.Utterance {
	at := time.Date(2025, 1, 1, 0, 0, i, 0, time.UTC)
	return agent.Utterance{Role: "assistant", Text: fmt.Sprintf("utterance %d", i), SessionID: "s", Start: at, End: at}
}

// checkOnceInOrder: the transcripts are exactly "utterance 0".."utterance n-1", each once.
func checkOnceInOrder(t *testing.T, msgs []msg, n int) {
	t.Helper()
	if len(msgs) != n {
		t.Errorf("%d transcripts, want %d", len(msgs), n)
	}
	for i, m := range msgs {
		if got := m.json(t)["text"]; got != fmt.Sprintf("utterance %d", i) {
			t.Fatalf("transcript %d is %q: lost, repeated or out of order (all: %v)", i, got, msgs)
		}
	}
}

// checkInOrderAtLeastOnce: the transcripts are "utterance 0".."utterance n-1" in order, none
// lost; a transcript may come twice in a row with the same msg_id and nothing else. That is the
// repeat an outage can bring: paho re-sends on the new connection the stored copy of what was in
// flight when the link dropped, which the broker may already have had, or which a Publish that
// waited across the reconnect sends too (QoS 1 is at least once; a consumer drops the repeat by
// msg_id). A repeat under another msg_id (the outbox sending a message twice) fails.
func checkInOrderAtLeastOnce(t *testing.T, msgs []msg, n int) {
	t.Helper()
	var distinct []msg
	for _, m := range msgs {
		if k := len(distinct); k > 0 && m.Payload == distinct[k-1].Payload {
			t.Logf("repeated with its msg_id: %s", m.Payload)
			continue
		}
		distinct = append(distinct, m)
	}
	checkOnceInOrder(t, distinct, n)
}

// The broker goes away mid-conversation: what is said meanwhile is queued and arrives, in
// order, when it is back.
func TestBrokerOutage(t *testing.T) {
	br := testbroker.Start(t, testbroker.WithPersistence())
	w := watch(t, br.URL(), persistent("outage-watcher"))
	fa := newFakeAgent()
	cfg := testConfig(t, br.URL())
	startBridge(t, cfg, "k", fa)
	w.waitFor("omnisat/k/availability", wait, payloadIs("online"))
	for i := 0; i < 5; i++ {
		fa.emit(utter(i))
	}
	w.waitCount("omnisat/k/transcript", 5, wait)

	br.Stop()
	for i := 5; i < 25; i++ {
		fa.emit(utter(i))
		if i%5 == 0 {
			fa.emit(agent.Lifecycle{Kind: "reconnect", Reason: fmt.Sprintf("during outage %d", i), At: time.Now()})
		}
	}
	time.Sleep(1500 * time.Millisecond) // a while away
	br.Restart()
	for i := 25; i < 30; i++ {
		fa.emit(utter(i))
	}
	// In order, so the last one's arrival means all have come (or are lost: checked below).
	w.waitFor("omnisat/k/transcript", 20*time.Second, jsonField(t, "text", "utterance 29"))
	time.Sleep(300 * time.Millisecond) // nothing extra arrives
	checkInOrderAtLeastOnce(t, w.all("omnisat/k/transcript"), 30)
	evs := w.waitCount("omnisat/k/event", 4, wait)
	for i, e := range evs {
		if want := fmt.Sprintf("during outage %d", 5+5*i); e.json(t)["reason"] != want {
			t.Errorf("event %d: %v, want reason %q", i, e.Payload, want)
		}
	}
	w.waitFor("omnisat/k/availability", wait, payloadIs("online"))
}

// The same across a restart of the process: a new bridge on the same outbox sends what the old
// one could not.
func TestOutboxSurvivesRestart(t *testing.T) {
	br := testbroker.Start(t)
	outbox := t.TempDir()
	cfg := testConfig(t, br.URL())
	cfg.Outbox.Path = outbox

	br.Stop() // unreachable from the start: the bridge must start anyway
	fa := newFakeAgent()
	r := startBridge(t, cfg, "k", fa)
	for i := 0; i < 10; i++ {
		fa.emit(utter(i))
	}
	time.Sleep(200 * time.Millisecond)
	r.stop(t)

	br.Restart()
	w := watch(t, br.URL())
	fa2 := newFakeAgent()
	startBridge(t, cfg, "k", fa2)
	w.waitCount("omnisat/k/transcript", 10, wait)
	for i := 10; i < 15; i++ {
		fa2.emit(utter(i))
	}
	w.waitCount("omnisat/k/transcript", 15, wait)
	time.Sleep(300 * time.Millisecond)
	checkOnceInOrder(t, w.all("omnisat/k/transcript"), 15)
}

// A bridge killed with SIGKILL leaves "offline" on availability through its will.
func TestKillLeavesOfflineWill(t *testing.T) {
	if os.Getenv("OMNISAT_MQTT_HELPER") != "" {
		t.Skip("in the helper process")
	}
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBridge$")
	cmd.Env = append(os.Environ(), "OMNISAT_MQTT_HELPER="+br.URL(), "OMNISAT_MQTT_HELPER_OUTBOX="+t.TempDir())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	w.waitFor("omnisat/helper/availability", 20*time.Second, payloadIs("online"))
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	w.waitFor("omnisat/helper/availability", wait, payloadIs("offline"))
	if got, _ := retained(t, br.URL(), "omnisat/helper/availability"); got != "offline" {
		t.Errorf("retained availability after kill -9: %q", got)
	}
}

// TestHelperBridge is the child process of TestKillLeavesOfflineWill: a minimal bridge that runs
// until it is killed.
func TestHelperBridge(t *testing.T) {
	broker := os.Getenv("OMNISAT_MQTT_HELPER")
	if broker == "" {
		t.Skip("only run as a helper process")
	}
	cfg := mqtt.Config{Broker: broker, Outbox: mqtt.OutboxConfig{Path: os.Getenv("OMNISAT_MQTT_HELPER_OUTBOX")}}
	b, err := mqtt.New(cfg, "helper", "test", newFakeAgent(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = b.Run(ctx)
}
