package mqtt

import "github.com/omnisat/omnisat/agent"

// Home Assistant device-based discovery: one retained message on
// <discovery_prefix>/device/<device_id>/config holding the device, the origin and every entity
// ("components"). Field names follow https://www.home-assistant.io/integrations/mqtt/
// (section "Device discovery payload"); the device and origin use the documented abbreviations
// (dev: ids, name, mf, mdl, sw; o: name, sw, url), the components use full option names.

const originURL = "https://github.com/omnisat/omnisat"

// allStates are the options of the state enum sensor (speaking is shown as listening there; the
// assistant's speech has its own binary sensor).
var allStates = []string{
	string(agent.StateIdle), string(agent.StateConnecting), string(agent.StateQueued), string(agent.StateStarting),
	string(agent.StateListening), string(agent.StateReconnecting),
	string(agent.StateStopped), string(agent.StateError),
}

func (b *Bridge) discoveryTopic() string {
	return b.cfg.DiscoveryPrefix + "/device/" + b.objectID + "/config"
}

// discoveryPayload builds the device discovery message.
func (b *Bridge) discoveryPayload() map[string]any {
	p := b.cfg.Prefix
	uid := func(s string) string { return "omnisat_" + b.objectID + "_" + s }
	avail := func(m map[string]any) map[string]any {
		m["availability_topic"] = p + "/availability"
		m["payload_available"] = "online"
		m["payload_not_available"] = "offline"
		return m
	}
	state := p + "/state"
	stats := p + "/stats"
	activity := p + "/activity"
	cmp := map[string]any{
		"state": avail(map[string]any{
			"p": "sensor", "unique_id": uid("state"), "name": "State",
			"state_topic": state, "value_template": "{{ value_json.state }}",
			"device_class": "enum", "options": allStates,
			"json_attributes_topic": state, "icon": "mdi:robot",
		}),
		"connected": avail(map[string]any{
			"p": "binary_sensor", "unique_id": uid("connected"), "name": "Connected",
			"state_topic": state, "value_template": "{{ 'ON' if value_json.connected else 'OFF' }}",
			"payload_on": "ON", "payload_off": "OFF",
			"device_class": "connectivity", "entity_category": "diagnostic", "icon": "mdi:lan-connect",
		}),
		"last_utterance": avail(map[string]any{
			"p": "sensor", "unique_id": uid("last_utterance"), "name": "Last assistant utterance",
			"state_topic": p + "/last_utterance", "value_template": "{{ value_json.text[:255] }}",
			"json_attributes_topic": p + "/last_utterance", "icon": "mdi:message-text",
		}),
		"kv_cache": avail(map[string]any{
			"p": "sensor", "unique_id": uid("kv_cache"), "name": "KV cache length",
			"state_topic": stats, "value_template": "{{ value_json.kv_cache_length }}",
			"unit_of_measurement": "tokens", "state_class": "measurement",
			"entity_category": "diagnostic", "icon": "mdi:memory",
		}),
		"queue_position": avail(map[string]any{
			"p": "sensor", "unique_id": uid("queue_position"), "name": "Queue position",
			"state_topic": state, "value_template": "{{ value_json.queue_position }}",
			"state_class": "measurement", "entity_category": "diagnostic", "icon": "mdi:human-queue",
		}),
		"reconnects": avail(map[string]any{
			"p": "sensor", "unique_id": uid("reconnects"), "name": "Reconnects",
			"state_topic": stats, "value_template": "{{ value_json.reconnects }}",
			"state_class": "total_increasing", "entity_category": "diagnostic", "icon": "mdi:connection",
		}),
		"session": avail(map[string]any{
			"p": "switch", "unique_id": uid("session"), "name": "Session",
			"command_topic": p + "/cmd/session", "payload_on": "start", "payload_off": "stop",
			"state_topic":    state,
			"value_template": "{{ 'OFF' if value_json.state in ['idle', 'stopped', 'error'] else 'ON' }}",
			"state_on":       "ON", "state_off": "OFF", "icon": "mdi:account-voice",
		}),
		"mic_mute": avail(map[string]any{
			"p": "switch", "unique_id": uid("mic_mute"), "name": "Microphone mute",
			"command_topic": p + "/cmd/mute", "payload_on": "ON", "payload_off": "OFF",
			"state_topic": state, "value_template": "{{ 'ON' if value_json.mic_muted else 'OFF' }}",
			"state_on": "ON", "state_off": "OFF", "icon": "mdi:microphone-off",
		}),
		"camera": avail(map[string]any{
			"p": "switch", "unique_id": uid("camera"), "name": "Camera",
			"command_topic": p + "/cmd/camera", "payload_on": "ON", "payload_off": "OFF",
			"state_topic": state, "value_template": "{{ 'ON' if value_json.camera_on else 'OFF' }}",
			"state_on": "ON", "state_off": "OFF", "icon": "mdi:camera",
		}),
		"interrupt": avail(map[string]any{
			"p": "button", "unique_id": uid("interrupt"), "name": "Interrupt",
			"command_topic": p + "/cmd/interrupt", "payload_press": "PRESS", "icon": "mdi:hand-back-left",
		}),
		"volume": avail(map[string]any{
			"p": "number", "unique_id": uid("volume"), "name": "Volume",
			"command_topic": p + "/cmd/volume", "state_topic": state, "value_template": "{{ value_json.volume }}",
			"min": 0, "max": 100, "step": 1, "mode": "slider", "unit_of_measurement": "%",
			"icon": "mdi:volume-high",
		}),
		"instructions": avail(map[string]any{
			"p": "text", "unique_id": uid("instructions"), "name": "Instructions",
			"command_topic": p + "/cmd/instructions", "mode": "text", "max": 255,
			"entity_category": "config", "icon": "mdi:script-text",
		}),
		"say": avail(map[string]any{
			"p": "text", "unique_id": uid("say"), "name": "Say",
			"command_topic": p + "/cmd/say", "mode": "text", "max": 255, "icon": "mdi:bullhorn",
		}),
		// notify.send_message lands on say: announcements spoken by the satellite.
		"announce": avail(map[string]any{
			"p": "notify", "unique_id": uid("announce"), "name": "Announce",
			"command_topic": p + "/cmd/say", "icon": "mdi:bullhorn-outline",
		}),
		// Automations on what was said, and by whom (event types: the roles).
		"transcript": avail(map[string]any{
			"p": "event", "unique_id": uid("transcript"), "name": "Transcript",
			"state_topic": p + "/transcript", "event_types": []string{"user", "assistant"},
			"icon": "mdi:message-text-outline",
		}),
		"voice": avail(map[string]any{
			"p": "binary_sensor", "unique_id": uid("voice"), "name": "Voice activity",
			"state_topic": activity, "value_template": "{{ 'ON' if value_json.voice else 'OFF' }}",
			"payload_on": "ON", "payload_off": "OFF", "device_class": "sound",
			"json_attributes_topic": activity, "icon": "mdi:account-voice",
		}),
		"assistant_speaking": avail(map[string]any{
			"p": "binary_sensor", "unique_id": uid("assistant_speaking"), "name": "Assistant speaking",
			"state_topic": activity, "value_template": "{{ 'ON' if value_json.assistant_speaking else 'OFF' }}",
			"payload_on": "ON", "payload_off": "OFF", "icon": "mdi:speaker-message",
		}),
		"session_age": avail(map[string]any{
			"p": "sensor", "unique_id": uid("session_age"), "name": "Session age",
			"state_topic": stats, "value_template": "{{ value_json.session_age_s }}",
			"unit_of_measurement": "s", "device_class": "duration", "state_class": "measurement",
			"entity_category": "diagnostic", "icon": "mdi:timer-outline",
		}),
		"model_step": avail(map[string]any{
			"p": "sensor", "unique_id": uid("model_step"), "name": "Model step time",
			"state_topic": stats, "value_template": "{{ value_json.last_step.wall_clock_ms if value_json.last_step is defined and value_json.last_step.wall_clock_ms is defined else None }}",
			"unit_of_measurement": "ms", "device_class": "duration", "state_class": "measurement",
			"json_attributes_topic": stats, "json_attributes_template": "{{ (value_json.last_step if value_json.last_step is defined else {}) | tojson }}",
			"entity_category": "diagnostic", "icon": "mdi:timer-cog-outline",
		}),
	}
	if b.cfg.Image {
		// The newest frame sent to the model (opt-in, mqtt.image); unavailable while the camera is off.
		cmp["image"] = map[string]any{
			"p": "image", "unique_id": uid("image"), "name": "Last frame sent",
			"image_topic": p + "/image", "content_type": "image/jpeg", "icon": "mdi:camera-image",
			"availability_mode": "all",
			"availability": []map[string]any{
				{"topic": p + "/availability", "payload_available": "online", "payload_not_available": "offline"},
				{"topic": state, "value_template": "{{ 'online' if value_json.camera_on else 'offline' }}",
					"payload_available": "online", "payload_not_available": "offline"},
			},
		}
	}
	return map[string]any{
		"dev": map[string]any{
			"ids":  []string{"omnisat_" + b.objectID},
			"name": "omnisat " + b.deviceID,
			"mf":   "omnisat",
			"mdl":  "omnisat voice agent",
			"sw":   b.version,
		},
		"o":    map[string]any{"name": "omnisat", "sw": b.version, "url": originURL},
		"cmps": cmp,
		"qos":  1,
	}
}
