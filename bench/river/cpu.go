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

func clusterCPU(postmaster int) time.Duration {
	if postmaster <= 0 {
		return 0
	}
	total := procCPU(postmaster, true)
	procs, _ := os.ReadDir("/proc")
	parent := strconv.Itoa(postmaster)
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if f := procStat(n); len(f) > 1 && f[1] == parent {
			total += procCPU(n, false)
		}
	}
	return total
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

func procCPU(pid int, reaped bool) time.Duration {
	f := procStat(pid)
	if len(f) < 15 {
		return 0
	}
	last := 12
	if reaped {
		last = 14
	}
	n := 0
	for _, s := range f[11 : last+1] {
		v, _ := strconv.Atoi(s)
		n += v
	}
	return time.Duration(n) * clockTick
}
