package footprint

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// threadSample is what one thread had done by a moment: its name (comm: omnisat-aec for the
// echo canceller's thread, omnisat-grab for the camera's grab loop, the program's name for Go's
// threads and PortAudio's), time on CPU and context switches.
type threadSample struct {
	pid, tid      int
	comm          string
	cpu           time.Duration
	wakes, forced int64 // voluntary (it slept) and involuntary (it was preempted)
	faults        int64 // minor page faults: fresh memory touched (each costs a trap into the kernel)
}

// threadsOf samples every thread of pids.
func threadsOf(pids []int) map[int]threadSample {
	out := map[int]threadSample{}
	for _, pid := range pids {
		dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		for _, d := range dirs {
			tid, err := strconv.Atoi(filepath.Base(d))
			if err != nil {
				continue
			}
			comm, _ := os.ReadFile(filepath.Join(d, "comm"))
			sched, _ := os.ReadFile(filepath.Join(d, "schedstat"))
			status, _ := os.ReadFile(filepath.Join(d, "status"))
			stat, _ := os.ReadFile(filepath.Join(d, "stat"))
			out[tid] = threadSample{pid: pid, tid: tid, comm: strings.TrimSpace(string(comm)), cpu: time.Duration(onCPU(string(sched))),
				wakes: field(string(status), "voluntary_ctxt_switches:"), forced: field(string(status), "nonvoluntary_ctxt_switches:"),
				faults: minorFaults(string(stat))}
		}
	}
	return out
}

// reportThreads writes what each thread that lived through both samples did between them, per
// second: the busiest sleepers first (FOOTPRINT_THREADS=1). Threads are told apart by name
// and pid only: PortAudio's capture and playback threads carry the program's name, and show by
// their wake-ups (one per device period).
func reportThreads(w io.Writer, row string, before, after map[int]threadSample, seconds float64) {
	type rate struct {
		s                          threadSample
		cpu, wakes, forced, faults float64
	}
	var rows []rate
	for tid, a := range after {
		b, ok := before[tid]
		if !ok {
			continue
		}
		rows = append(rows, rate{a, float64(a.cpu-b.cpu) / float64(time.Millisecond) / seconds,
			float64(a.wakes-b.wakes) / seconds, float64(a.forced-b.forced) / seconds, float64(a.faults-b.faults) / seconds})
	}
	slices.SortFunc(rows, func(x, y rate) int {
		return cmp.Or(cmp.Compare(y.wakes, x.wakes), cmp.Compare(x.s.tid, y.s.tid))
	})
	var cpu, wakes float64
	fmt.Fprintf(w, "%s, per thread over %.0f s of steady streaming:\n", row, seconds)
	for _, r := range rows {
		cpu, wakes = cpu+r.cpu, wakes+r.wakes
		if r.cpu == 0 && r.wakes == 0 && r.forced == 0 && r.faults == 0 {
			continue // parked for the whole stretch
		}
		fmt.Fprintf(w, "  pid %-7d tid %-7d %-16s %8.3f ms/s  %7.2f wake-ups/s  %6.2f preempted/s  %7.1f page faults/s\n",
			r.s.pid, r.s.tid, r.s.comm, r.cpu, r.wakes, r.forced, r.faults)
	}
	fmt.Fprintf(w, "  all threads %8.3f ms/s  %7.2f wake-ups/s\n", cpu, wakes)
}

// minorFaults is a thread's minor page faults from its stat file: the tenth field, counted from
// the state after the command name (which may itself hold spaces and parentheses).
func minorFaults(stat string) int64 {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 8 {
		return 0
	}
	n, _ := strconv.ParseInt(f[7], 10, 64) // state ppid pgrp session tty_nr tpgid flags minflt
	return n
}
