package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/omnisat/omnisat/internal/lines"
)

// simulatorProgram is the model server simulator's own program (cmd/omnisat-simulator).
func simulatorProgram() helperProgram {
	return helperProgram{name: "omnisat-simulator", env: "OMNISAT_SIMULATOR_PROGRAM", what: "the simulator program",
		neededBy: "the simulator was asked for"}
}

const (
	// simulatorStartWait bounds how long run --simulator waits for the simulator's URL.
	simulatorStartWait = 30 * time.Second
	// simulatorStopWait is how long a simulator told to stop may take before it is killed.
	simulatorStopWait = 5 * time.Second
)

// runSimulate is `omnisat simulate`: the simulator program with the same arguments and
// streams, stopped with SIGINT when omnisat is; its exit code is omnisat's.
func runSimulate(ctx context.Context, env *cliEnv, args []string) int {
	program, err := findProgram(simulatorProgram())
	if err != nil {
		fmt.Fprintf(env.stderr, "omnisat simulate: %v\n", err)
		return exitFailure
	}
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Stdout, cmd.Stderr = env.stdout, env.stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = simulatorStopWait
	stopWithParent(cmd)
	err = cmd.Run()
	if st := cmd.ProcessState; st != nil && st.Exited() {
		return st.ExitCode() // stopped as asked (0), or its own failure, already said
	}
	fmt.Fprintf(env.stderr, "omnisat simulate: %v\n", err)
	return exitFailure
}

// simulatorChild is the simulator program serving `omnisat run --simulator`.
type simulatorChild struct {
	cmd    *exec.Cmd
	url    string
	logged sync.WaitGroup // the two goroutines reading its output and its log
}

// startSimulator starts the simulator program on a free port of the loopback, speaking
// dialect, and waits for its URL. Its log lines go to log as warnings.
func startSimulator(dialect string, log *slog.Logger) (*simulatorChild, error) {
	program, err := findProgram(simulatorProgram())
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(program, "--listen", "127.0.0.1:0", "--dialect", dialect, "--workers", "2")
	stopWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the simulator: %w", err)
	}
	s := &simulatorChild{cmd: cmd}
	s.logged.Add(2)
	go func() {
		defer s.logged.Done()
		lines.Each(stderr, func(line string) { log.Warn("simulator: " + line) })
	}()
	// Its first line, or nothing (closed) if its output ends first.
	first := make(chan string, 1)
	go func() {
		defer s.logged.Done()
		said := false
		lines.Each(stdout, func(line string) {
			if !said {
				first <- line
				said = true
			}
		})
		if !said {
			close(first)
		}
	}()
	timeout := time.NewTimer(simulatorStartWait)
	defer timeout.Stop()
	select {
	case line, ok := <-first:
		fields := strings.Fields(line)
		switch {
		case !ok:
			err = errors.New("the simulator ended before it said where it listens (its log is above)")
		case len(fields) > 0 && strings.HasPrefix(fields[len(fields)-1], "ws://"):
			s.url = fields[len(fields)-1]
			return s, nil
		default:
			err = fmt.Errorf("the simulator said %q, not its URL", line)
		}
	case <-timeout.C:
		err = fmt.Errorf("the simulator gave no URL within %v", simulatorStartWait)
	}
	s.Close()
	return nil, err
}

// URL is where the simulator listens.
func (s *simulatorChild) URL() string { return s.url }

// Close stops the simulator (SIGINT, then SIGKILL after simulatorStopWait) and waits for it.
func (s *simulatorChild) Close() error {
	s.cmd.Process.Signal(os.Interrupt)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.logged.Wait() // both pipes at their end: the program has exited (or closed them)
	}()
	t := time.NewTimer(simulatorStopWait)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-stopped
	}
	return s.cmd.Wait()
}
