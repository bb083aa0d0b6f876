package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's CPU times.
const clockTick = 10 * time.Millisecond

// cpuUse is CPU time spent by this process and by the PostgreSQL cluster.
type cpuUse struct {
	Self, Postgres time.Duration
}

func (a cpuUse) sub(b cpuUse) cpuUse { return cpuUse{a.Self - b.Self, a.Postgres - b.Postgres} }

// sampleCPU reads this process's CPU time and the cluster's: the postmaster,
// the children it already reaped, and its live children (backends, vacuum,
// checkpointer...).
func sampleCPU(postmaster int) cpuUse {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	u := cpuUse{Self: time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))}
	if postmaster > 0 {
		u.Postgres = procCPU(postmaster, true)
		for _, c := range childrenOf(postmaster) {
			u.Postgres += procCPU(c, false)
		}
	}
	return u
}

// procStat returns the fields of /proc/<pid>/stat after the command name.
func procStat(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

// procCPU is utime+stime of pid, plus cutime+cstime when reaped is set.
func procCPU(pid int, reaped bool) time.Duration {
	f := procStat(pid)
	if len(f) < 15 {
		return 0
	}
	n := 0
	last := 12 // fields 14..15 of stat, 11..12 here: utime, stime
	if reaped {
		last = 14 // and cutime, cstime
	}
	for _, s := range f[11 : last+1] {
		v, _ := strconv.Atoi(s)
		n += v
	}
	return time.Duration(n) * clockTick
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	procs, _ := os.ReadDir("/proc")
	parent := strconv.Itoa(pid)
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if f := procStat(n); len(f) > 1 && f[1] == parent {
			out = append(out, n)
		}
	}
	return out
}

// postmasterPID finds the postmaster serving dataDir, or 0.
func postmasterPID(dataDir string) int {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte("\x00-D\x00"+dataDir+"\x00")) {
			return n
		}
	}
	return 0
}

// loadAverage is /proc/loadavg's 1-minute figure, or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
