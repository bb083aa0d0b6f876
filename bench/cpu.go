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
//
// A child that exits while the children are read moves its time from the
// live children into the postmaster's reaped total; read across that
// moment, its time is counted twice or not at all (an autovacuum worker's
// seconds made a minute's reading negative). So the sample is read again
// until the reaped total is the same before and after the children.
func sampleCPU(postmaster int) cpuUse {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	u := cpuUse{Self: time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))}
	if postmaster > 0 {
		u.Postgres = clusterCPU(postmaster)
	}
	return u
}

// clusterCPU is the postmaster's CPU time, its reaped children's and its
// live children's, read while no child was reaped (or, after 100 tries,
// the last reading).
func clusterCPU(postmaster int) time.Duration {
	var total time.Duration
	for range 100 {
		own, reaped := procTimes(postmaster)
		total = own + reaped
		for _, c := range childrenOf(postmaster) {
			own, _ := procTimes(c)
			total += own
		}
		if _, again := procTimes(postmaster); again == reaped {
			break
		}
	}
	return total
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

// procTimes returns pid's utime+stime and its cutime+cstime.
func procTimes(pid int) (own, children time.Duration) {
	f := procStat(pid)
	if len(f) < 15 {
		return 0, 0
	}
	ticks := func(fields []string) (n time.Duration) {
		for _, s := range fields {
			v, _ := strconv.Atoi(s)
			n += time.Duration(v) * clockTick
		}
		return n
	}
	// Fields 14..17 of stat (11..14 here): utime, stime, cutime, cstime.
	return ticks(f[11:13]), ticks(f[13:15])
}

// procRunTime returns the time pid has spent on a CPU, to the nanosecond
// (/proc/<pid>/schedstat's first field); 0 where it cannot be read.
func procRunTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	ns, _ := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns)
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
