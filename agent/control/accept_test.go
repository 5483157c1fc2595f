package control

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/syncbuf"
)

// childSocketEnv names the socket a child test process serves with few file descriptors.
const childSocketEnv = "OMNISAT_CONTROL_TEST_SOCKET"

// When the process runs out of file descriptors (EMFILE), Accept fails until some are freed;
// the socket must keep serving after that instead of closing for good. A child process serves
// the socket with a file limit a few descriptors above what it uses; the test holds more
// connections open than that allows, lets them go, and asks for the status again.
func TestAcceptOutlivesDescriptorExhaustion(t *testing.T) {
	if path := os.Getenv(childSocketEnv); path != "" {
		serveWithFewDescriptors(t, path)
		return
	}
	path := filepath.Join(t.TempDir(), "control.sock")
	child := exec.Command(os.Args[0], "-test.run=^TestAcceptOutlivesDescriptorExhaustion$", "-test.v")
	child.Env = append(os.Environ(), childSocketEnv+"="+path)
	var logs syncbuf.Buffer
	child.Stderr = &logs
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the child serves until its stdin closes
		child.Wait()
		if t.Failed() {
			t.Logf("child's log:\n%s", logs.String())
		}
	}()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "serving" {
	}

	// More connections than the child has descriptors left: it accepts a few, then Accept
	// fails with EMFILE while the rest wait in the listen queue.
	var held []net.Conn
	for range 12 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("dial %d: %v", len(held), err)
		}
		held = append(held, c)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "too many open files") })
	for _, c := range held {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := Call(ctx, path, Request{Cmd: "status"})
	if err != nil || !resp.OK {
		t.Fatalf("after the descriptors came back: %v %+v", err, resp)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "accepting again") })
}

// serveWithFewDescriptors is the child: it serves the socket at path with a file limit four
// above the descriptors it holds, until its stdin closes.
func serveWithFewDescriptors(t *testing.T, path string) {
	srv, sup := listen(t, path, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(open) + 4)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	go sup.Run(ctx)
	os.Stdout.WriteString("serving\n")
	buf := make([]byte, 1)
	os.Stdin.Read(buf)
	cancel()
	<-done
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous: the machine may be busy
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
