package main

import (
	"reflect"
	"strings"
)

// reloadPlan says what a new configuration changes, for the log and the config_reloaded event.
// What is kept, handed over or rebuilt the satellite decides from the parts themselves:
//
//   - live: applied at once, nothing restarts: audio.volume, log.level, log.format,
//     mqtt.stats_interval, and server.instructions (a new session carries the new prompt).
//   - restart: the sections whose change rebuilds something: audio and camera reopen their
//     devices and restart the agent; server and session restart the agent (its devices are
//     handed over); mqtt and device_id reconnect MQTT only; control moves the control socket;
//     state_dir moves the socket and the outbox and restarts the agent (its settings file).
type reloadPlan struct {
	live    []string
	restart []string
}

func (p reloadPlan) empty() bool { return len(p.live) == 0 && len(p.restart) == 0 }

func (p reloadPlan) String() string {
	var parts []string
	if len(p.live) > 0 {
		parts = append(parts, "changed live: "+strings.Join(p.live, ", "))
	}
	if len(p.restart) > 0 {
		parts = append(parts, "restarted for: "+strings.Join(p.restart, ", "))
	}
	return strings.Join(parts, "; ")
}

// planReload compares two complete (defaulted) configurations section by section.
func planReload(old, next *fileConfig) reloadPlan {
	var p reloadPlan
	changed := func(a, b any) bool { return !reflect.DeepEqual(a, b) }
	live := func(key string, a, b any) {
		if changed(a, b) {
			p.live = append(p.live, key)
		}
	}
	restart := func(key string, a, b any) {
		if changed(a, b) {
			p.restart = append(p.restart, key)
		}
	}
	live("audio.volume", *old.Audio.Volume, *next.Audio.Volume)
	live("server.instructions", old.Server.Instructions, next.Server.Instructions)
	live("log.level", old.Log.Level, next.Log.Level)
	live("log.format", old.Log.Format, next.Log.Format)
	live("mqtt.stats_interval", old.MQTT.StatsInterval, next.MQTT.StatsInterval)

	oldServer, nextServer := old.Server, next.Server
	oldServer.Instructions, nextServer.Instructions = "", ""
	restart("server", oldServer, nextServer)
	restart("session", old.Session, next.Session)
	oldAudio, nextAudio := old.Audio, next.Audio
	oldAudio.Volume, nextAudio.Volume = nil, nil
	restart("audio", oldAudio, nextAudio)
	restart("camera", old.Camera, next.Camera)
	restart("control", old.socketPath(), next.socketPath())
	restart("device_id", old.DeviceID, next.DeviceID)
	restart("state_dir", old.StateDir, next.StateDir)
	oldMQTT, nextMQTT := old.MQTT, next.MQTT
	oldMQTT.StatsInterval, nextMQTT.StatsInterval = 0, 0
	restart("mqtt", oldMQTT, nextMQTT)
	return p
}
