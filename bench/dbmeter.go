package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// dbMeter attributes the cluster's CPU to its databases process by process,
// so that two workloads taking turns on one server are each charged their
// own work whenever it runs: a backend's and an autovacuum worker's time go
// to the database its process title names (PostgreSQL's
// update_process_title, on by default: "postgres: user db host(port) ..."
// and "postgres: autovacuum worker db"), a parallel worker's to its
// leader's, and every other child's (checkpointer, WAL writer, background
// writer, the launchers) to shared (""). It reads /proc/<pid>/schedstat at
// every sample; a process that exits between two samples loses the time it
// spent since the last one (sample often enough that an autovacuum worker's
// tail is small).
type dbMeter struct {
	postmaster int

	mu   sync.Mutex
	seen map[int]seenProc
	use  map[string]time.Duration
}

// seenProc is a child as last sampled.
type seenProc struct {
	db  string
	run time.Duration
}

// newDBMeter returns a meter of the cluster of postmaster, counting from
// now: its first sample only notes what each child had spent before.
func newDBMeter(postmaster int) *dbMeter {
	m := &dbMeter{postmaster: postmaster, seen: map[int]seenProc{}, use: map[string]time.Duration{}}
	m.sample()
	m.use = map[string]time.Duration{}
	return m
}

// run samples every interval until ctx ends.
func (m *dbMeter) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.sample()
		}
	}
}

// totals samples once more and returns the CPU time each database's
// processes spent since the meter started: a database's name keys its
// backends' time, autovacuumOf(name) its autovacuum workers', "" the
// shared processes'.
func (m *dbMeter) totals() map[string]time.Duration {
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]time.Duration, len(m.use))
	for k, v := range m.use {
		out[k] = v
	}
	return out
}

// sample adds each live child's CPU time since its last sample to its
// database.
func (m *dbMeter) sample() {
	m.mu.Lock()
	defer m.mu.Unlock()
	live := map[int]bool{}
	for _, pid := range childrenOf(m.postmaster) {
		live[pid] = true
		p, ok := m.seen[pid]
		if !ok {
			title := processTitle(pid)
			if leader, ok := parallelLeader(title); ok {
				// The leader is alive while its workers run.
				title = processTitle(leader)
			}
			p.db = titleDatabase(title)
			if strings.HasPrefix(title, "postgres: autovacuum worker ") {
				p.db = autovacuumOf(p.db)
			}
		}
		if run := procRunTime(pid); run > p.run {
			m.use[p.db] += run - p.run
			p.run = run
		}
		m.seen[pid] = p
	}
	for pid := range m.seen {
		if !live[pid] {
			delete(m.seen, pid)
		}
	}
}

// autovacuumOf is the key of db's autovacuum workers in a dbMeter's
// totals (db's own key holds its backends and their parallel workers).
func autovacuumOf(db string) string { return "autovacuum:" + db }

// processTitle is /proc/<pid>/cmdline as ps shows it.
func processTitle(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// titleDatabase is the database a PostgreSQL child's title names, or ""
// for a process of the whole cluster.
func titleDatabase(title string) string {
	rest, ok := strings.CutPrefix(title, "postgres: ")
	if !ok {
		return ""
	}
	if db, ok := strings.CutPrefix(rest, "autovacuum worker "); ok {
		return strings.TrimSpace(db)
	}
	// A backend: user, database, then the client's address ("host(port)"
	// or "[local]").
	f := strings.Fields(rest)
	if len(f) >= 3 && (strings.HasSuffix(f[2], ")") || f[2] == "[local]") {
		return f[1]
	}
	return ""
}

// parallelLeader is the leader's pid of a parallel worker's title.
func parallelLeader(title string) (int, bool) {
	rest, ok := strings.CutPrefix(title, "postgres: parallel worker for PID ")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(rest))
	return pid, err == nil
}
