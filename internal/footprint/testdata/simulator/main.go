// Command simulator is `omnisat simulate` as a small pure-Go program, for BenchmarkFootprint:
// the model server runs in a process that shares no binary and no library with the omnisat
// being measured, as on a satellite whose server is elsewhere (its private memory would
// otherwise hide whatever pages both map).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/omnisat/omnisat/realtime/realtimetest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv, err := realtimetest.Listen("127.0.0.1:0", realtimetest.Options{Workers: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("simulator listening on", srv.URL())
	<-ctx.Done()
	srv.Close()
}
