module github.com/omnisat/omnisat

go 1.24.0

require (
	github.com/gorilla/websocket v1.5.3
	gopkg.in/yaml.v3 v3.0.1
)

require (
	gocv.io/x/gocv v0.31.0
	golang.org/x/sys v0.36.0
)

require github.com/kardianos/service v1.3.0

require github.com/segmentio/asm v1.2.1 // indirect

require (
	github.com/eclipse/paho.mqtt.golang v1.5.1
	golang.org/x/net v0.44.0 // indirect
	golang.org/x/sync v0.17.0 // indirect
)
