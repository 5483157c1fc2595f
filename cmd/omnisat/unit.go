package main

import (
	"strings"
)

// serviceName names the systemd unit, the system user and the state and config folders.
const serviceName = "omnisat"

// packagedBinary is where the .deb puts the binary; packaging/omnisat.service is the unit
// rendered for it and defaultConfigPath (a test keeps the two identical).
const packagedBinary = "/usr/bin/omnisat"

// unitTemplate is the one systemd unit of the omnisat service: `omnisat service install` writes
// it and the .deb ships it. @EXEC_START@ is the only thing that varies. Why each hardening line is
// there, and why some usual ones are not, is in packaging/README.md; in short, the service keeps
// the sound and video devices its user's groups open (no PrivateDevices, no DeviceAllow list: the
// implicit one of ProtectClock would close /dev/snd and /dev/video*), and its network.
const unitTemplate = `# omnisat: the satellite service. Change it with a drop-in (systemctl edit omnisat), not here.
[Unit]
Description=omnisat satellite of a realtime omni-modal model
Documentation=https://github.com/omnisat/omnisat#installation
Wants=network-online.target
After=network-online.target sound.target
# Never give up restarting: a device in the field must come back by itself.
StartLimitIntervalSec=0

[Service]
Type=exec
ExecStart=@EXEC_START@
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=5s
TimeoutStopSec=20s
User=omnisat
Group=omnisat
SupplementaryGroups=audio video
# Secrets for ${VAR} in the configuration, e.g. OMNISAT_MQTT_PASSWORD=...
EnvironmentFile=-/etc/default/omnisat
StateDirectory=omnisat
StateDirectoryMode=0750
ConfigurationDirectory=omnisat
WorkingDirectory=%S/omnisat
UMask=0027

NoNewPrivileges=yes
CapabilityBoundingSet=
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RemoveIPC=yes
PrivateMounts=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
`

// renderUnit is the unit that runs binary with the configuration file config.
func renderUnit(binary, config string) string {
	words := []string{quoteUnitWord(binary, false)}
	for _, arg := range []string{"run", "-c", config} {
		words = append(words, quoteUnitWord(arg, true))
	}
	return strings.Replace(unitTemplate, "@EXEC_START@", strings.Join(words, " "), 1)
}

// quoteUnitWord quotes one ExecStart word the way systemd reads it back: double quotes around
// anything but plain path characters, a backslash before " and \, % doubled (systemd expands
// specifiers everywhere) and, in arguments, $ doubled (systemd expands variables in arguments,
// not in the executable's path).
func quoteUnitWord(s string, argument bool) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,@=", r)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	escapes := []string{`\`, `\\`, `"`, `\"`, `%`, `%%`}
	if argument {
		escapes = append(escapes, `$`, `$$`)
	}
	return `"` + strings.NewReplacer(escapes...).Replace(s) + `"`
}
