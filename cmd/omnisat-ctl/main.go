// Command omnisat-ctl drives a running omnisat through its control socket, like `omnisat ctl`,
// but as a small pure-Go program: it starts in milliseconds, where the omnisat binary spends
// about 0.2 s loading OpenCV's libraries. Use it from GPIO buttons and kiosk scripts.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/omnisat/omnisat/agent/control"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := control.CLI{Name: "omnisat-ctl", Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
