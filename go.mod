module github.com/omnisat/omnisat

go 1.24

require (
	github.com/gorilla/websocket v1.5.3
	gopkg.in/yaml.v3 v3.0.1
)

require (
	gocv.io/x/gocv v0.31.0
	golang.org/x/sys v0.35.0
)
