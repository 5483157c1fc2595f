package main

import (
	"reflect"
	"strings"
)

// reloadPlan says what a new configuration changes in a running agent.
//
//   - live: applied at once, nothing restarts: audio.volume, log.level, mqtt.stats_interval,
//     and server.instructions (which starts a new session: the prompt is part of its set-up).
//   - restartMQTT: any other mqtt key; only the MQTT connection is rebuilt.
//   - restartAll: anything else (server, session, audio, camera, control, device_id,
//     state_dir, log.format): devices reopen and a new session starts.
type reloadPlan struct {
	live        []string
	restart     []string
	restartMQTT bool
	restartAll  bool
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
			p.restartAll = true
		}
	}
	live("audio.volume", *old.Audio.Volume, *next.Audio.Volume)
	live("server.instructions", old.Server.Instructions, next.Server.Instructions)
	live("log.level", old.Log.Level, next.Log.Level)
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
	restart("log.format", old.Log.Format, next.Log.Format)

	oldMQTT, nextMQTT := old.MQTT, next.MQTT
	oldMQTT.StatsInterval, nextMQTT.StatsInterval = 0, 0
	if changed(oldMQTT, nextMQTT) {
		p.restart = append(p.restart, "mqtt")
		p.restartMQTT = true
	}
	return p
}
