package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDBMeterChargesEachDatabaseItsOwnWork: the work of one database's
// backend is charged to that database, not to another whose backend stays
// idle meanwhile, nor to the cluster's shared processes.
func TestDBMeterChargesEachDatabaseItsOwnWork(t *testing.T) {
	pg := servers.Postgres(t)
	ctx := context.Background()
	connect := func() (*pgx.Conn, string) {
		url, err := pg.CreateDatabase(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c, databaseName(url)
	}
	busy, busyDB := connect()
	idle, idleDB := connect()
	postmaster := postmasterPID(pg.DataDir)
	if postmaster == 0 {
		t.Fatal("no postmaster found for", pg.DataDir)
	}
	m := newDBMeter(postmaster)
	meterCtx, stop := context.WithCancel(ctx)
	defer stop()
	go m.run(meterCtx, 10*time.Millisecond)
	if _, err := idle.Exec(ctx, "select 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := busy.Exec(ctx, "select count(*) from generate_series(1, 5000000) g where g % 7 = 1"); err != nil {
		t.Fatal(err)
	}
	u := m.totals()
	t.Logf("busy %s, idle %s, shared %s", u[busyDB], u[idleDB], u[""])
	if u[busyDB] < 100*time.Millisecond {
		t.Errorf("the busy database was charged %s, want its query's time", u[busyDB])
	}
	if u[idleDB] > u[busyDB]/10 || u[""] > u[busyDB]/10 {
		t.Errorf("the idle database (%s) or the shared processes (%s) were charged a share of the busy one's %s", u[idleDB], u[""], u[busyDB])
	}
}

// TestTitleDatabase: the database of each kind of PostgreSQL process title
// (as /proc/<pid>/cmdline shows them for PostgreSQL 15).
func TestTitleDatabase(t *testing.T) {
	cases := map[string]string{
		"postgres: bench churn_40000 127.0.0.1(39166) idle":     "churn_40000",
		"postgres: postgres churn_a 127.0.0.1(39166) DELETE":    "churn_a",
		"postgres: bench churn_40000_legacy [local] SELECT":     "churn_40000_legacy",
		"postgres: autovacuum worker churn_40000_legacy":        "churn_40000_legacy",
		"postgres: checkpointer":                                "",
		"postgres: background writer":                           "",
		"postgres: walwriter":                                   "",
		"postgres: autovacuum launcher":                         "",
		"postgres: logical replication launcher":                "",
		"/usr/lib/postgresql/15/bin/postgres -D /tmp/x -p 5432": "",
		"postgres: parallel worker for PID 29926":               "",
	}
	for title, want := range cases {
		if got := titleDatabase(title); got != want {
			t.Errorf("titleDatabase(%q) = %q, want %q", title, got, want)
		}
	}
	if pid, ok := parallelLeader("postgres: parallel worker for PID 29926"); !ok || pid != 29926 {
		t.Errorf("parallelLeader = %d, %v; want 29926", pid, ok)
	}
	if _, ok := parallelLeader("postgres: bench db 127.0.0.1(1) idle"); ok {
		t.Error("a backend's title read as a parallel worker's")
	}
}
