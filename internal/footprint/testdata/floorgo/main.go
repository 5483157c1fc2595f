// Command floorgo is testdata/floor's job written in Go, for BenchmarkFootprint: once a second it
// wakes from a timer, base64-encodes a second of 16 kHz float32 audio and sends it over TCP. It
// shows what the Go runtime itself charges here for that job, apart from anything omnisat does:
//
//	floorgo PORT SECONDS plain   a time.Ticker and net.Conn.Write, as Go is usually written
//	floorgo PORT SECONDS quiet   a timerfd read and a raw write, both through the runtime's
//	                             poller: no runtime timer and no blocking-style system call
//
// The plain form pays the runtime's bookkeeping for both: a timer wakes the scheduler and its
// monitor thread (sysmon) when it is due, and a system call entered the usual way wakes the
// monitor so it can take the processor back should the call block.
package main

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) != 4 || (os.Args[3] != "plain" && os.Args[3] != "quiet") {
		fmt.Fprintln(os.Stderr, "usage: floorgo PORT SECONDS plain|quiet")
		os.Exit(2)
	}
	seconds, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fail(err)
	}
	audio := make([]byte, 64002) // one second, padded to whole 3-byte groups, as in floor.c
	for i := range audio {
		audio[i] = byte(i * 7)
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(len(audio)))
	conn, err := net.Dial("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fail(err)
	}
	if os.Args[3] == "plain" {
		tick := time.NewTicker(time.Second)
		for range seconds {
			<-tick.C
			base64.StdEncoding.Encode(out, audio)
			if _, err := conn.Write(out); err != nil {
				fail(err)
			}
		}
		return
	}
	wait := timerfdWaiter()
	send := rawSender(conn.(*net.TCPConn))
	for range seconds {
		wait()
		base64.StdEncoding.Encode(out, audio)
		send(out)
	}
}

// timerfdWaiter returns a function that sleeps until a once-a-second timerfd expires.
func timerfdWaiter() func() {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		fail(err)
	}
	second := unix.ItimerSpec{Interval: unix.Timespec{Sec: 1}, Value: unix.Timespec{Sec: 1}}
	if err := unix.TimerfdSettime(fd, 0, &second, nil); err != nil {
		fail(err)
	}
	rc, err := os.NewFile(uintptr(fd), "timerfd").SyscallConn()
	if err != nil {
		fail(err)
	}
	var expirations [8]byte
	read := func(fd uintptr) bool {
		_, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&expirations[0])), 8)
		return errno != syscall.EAGAIN
	}
	return func() {
		if err := rc.Read(read); err != nil {
			fail(err)
		}
	}
}

// rawSender returns a function that writes a whole buffer to c with raw system calls, waiting
// in the poller when the socket is full.
func rawSender(c *net.TCPConn) func([]byte) {
	rc, err := c.SyscallConn()
	if err != nil {
		fail(err)
	}
	var pending []byte
	var werr error
	write := func(fd uintptr) bool {
		for len(pending) > 0 {
			n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&pending[0])), uintptr(len(pending)))
			switch {
			case errno == syscall.EAGAIN:
				return false
			case errno == syscall.EINTR:
				continue
			case errno != 0:
				werr = errno
				return true
			}
			pending = pending[n:]
		}
		return true
	}
	return func(b []byte) {
		pending = b
		if err := rc.Write(write); err != nil {
			fail(err)
		}
		if werr != nil {
			fail(werr)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "floorgo:", err)
	os.Exit(1)
}
