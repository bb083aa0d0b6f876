package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The same CPU accounting as the bench program's cpu.go (this module must
// not import the bench module): this process by getrusage, the PostgreSQL
// cluster from /proc (postmaster, its reaped and live children).

const clockTick = 10 * time.Millisecond // USER_HZ

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}

// clusterCPU reads the cluster's CPU time as the bench program's does: a
// child reaped while the children are read would move its time from the
// live children into the postmaster's reaped total and be counted twice or
// not at all, so the reading is taken again until the reaped total is the
// same before and after the children (at most 100 times).
func clusterCPU(postmaster int) time.Duration {
	if postmaster <= 0 {
		return 0
	}
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

func procStat(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
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
