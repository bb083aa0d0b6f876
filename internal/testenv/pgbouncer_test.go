package testenv

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgbouncerClient connects through the pooler without pgx's statement
// cache, whose named statements a transaction-mode pooler loses.
func pgbouncerClient(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connecting through pgbouncer: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func backendPID(ctx context.Context, t *testing.T, tx pgx.Tx) int32 {
	t.Helper()
	var pid int32
	if err := tx.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("select pg_backend_pid(): %v", err)
	}
	return pid
}

func beginTx(ctx context.Context, t *testing.T, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	return tx
}

// startBouncer starts a PostgreSQL server of the test's own and pgbouncer
// with opts in front of it, both stopped when the test ends.
func startBouncer(t *testing.T, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	pg, err := StartPostgres()
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v", err)
	}
	t.Cleanup(pg.Stop)
	if pg.Port == 0 {
		t.Skip("TEST_DATABASE_URL is set: pgbouncer needs the test-started server")
	}
	bouncer, err := StartPgBouncer(pg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bouncer.Stop)
	return bouncer
}

func TestPgBouncerPoolsTransactions(t *testing.T) {
	t.Parallel()
	bouncer := startBouncer(t, PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	clients := make([]*pgx.Conn, 6)
	for i := range clients {
		clients[i] = pgbouncerClient(t, bouncer.URL)
	}

	// Six clients, their transactions overlapping, share at most the two
	// server connections of the pool. A pooler keeping a server per client
	// (session mode) would leave four of them waiting: they give up soon.
	phaseCtx, phaseCancel := context.WithTimeout(ctx, 15*time.Second)
	defer phaseCancel()
	var mu sync.Mutex
	pids := map[int32]bool{}
	var wg sync.WaitGroup
	for _, conn := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				tx, err := conn.Begin(phaseCtx)
				if err != nil {
					t.Errorf("begin (waiting for a server connection): %v", err)
					return
				}
				var pid int32
				err = tx.QueryRow(phaseCtx, "select pg_backend_pid()").Scan(&pid)
				if err == nil {
					_, err = tx.Exec(phaseCtx, "select pg_sleep(0.02)")
				}
				if err == nil {
					err = tx.Commit(phaseCtx)
				}
				if err != nil {
					tx.Rollback(ctx)
					t.Errorf("transaction through pgbouncer: %v", err)
					return
				}
				mu.Lock()
				pids[pid] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(pids) == 0 || len(pids) > 2 {
		t.Fatalf("%d clients saw %d distinct server backends %v, want 1 or 2 (default_pool_size 2)", len(clients), len(pids), pids)
	}

	// A prepares s1 on a server and, still connected, lets it go at
	// commit; B and C then take and hold both server connections of the
	// pool, so one of them must be the one A used.
	a, b, c := clients[0], clients[1], clients[2]
	txA := beginTx(ctx, t, a)
	if _, err := txA.Exec(ctx, "prepare s1 as select 1"); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	pidA := backendPID(ctx, t, txA)
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	txB := beginTx(ctx, t, b)
	pidB := backendPID(ctx, t, txB)
	txC := beginTx(ctx, t, c)
	pidC := backendPID(ctx, t, txC)
	if pidB == pidC {
		t.Fatalf("B and C, both in a transaction, share backend %d", pidB)
	}
	if pidA != pidB && pidA != pidC {
		t.Fatalf("A's server %d went to neither B (%d) nor C (%d) while they hold the pool's two: not transaction pooling", pidA, pidB, pidC)
	}
	holder, freed, freedPID := txB, txC, pidC
	if pidC == pidA {
		holder, freed, freedPID = txC, txB, pidB
	}

	// A's next transaction waits for a server, then gets the one freed,
	// not the one holding s1.
	type result struct {
		tx  pgx.Tx
		pid int32
		err error
	}
	started := make(chan result, 1)
	go func() {
		tx, err := a.Begin(ctx)
		if err != nil {
			started <- result{err: err}
			return
		}
		var pid int32
		err = tx.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid)
		started <- result{tx, pid, err}
	}()
	select {
	case r := <-started:
		t.Fatalf("A got a server (%d, %v) while B and C hold the pool's two", r.pid, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := freed.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-started
	if r.err != nil {
		t.Fatalf("A's second transaction: %v", r.err)
	}
	if r.pid != freedPID {
		t.Fatalf("A's second transaction is on backend %d, want %d, the only free one (%d is held)", r.pid, freedPID, pidA)
	}
	_, err := r.tx.Exec(ctx, "execute s1")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "26000" {
		t.Fatalf("execute s1 on another server: %v, want SQLSTATE 26000 (prepared statement does not exist)", err)
	}
	r.tx.Rollback(ctx)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Stop ends the process even with clients connected, and a second
	// Stop does nothing.
	pid := bouncer.cmd.Process.Pid
	bouncer.Stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pgbouncer (pid %d) after Stop: kill -0 says %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat(bouncer.dir); !os.IsNotExist(err) {
		t.Errorf("pgbouncer dir %s after Stop: %v", bouncer.dir, err)
	}
	bouncer.Stop()
}

// pgbouncer's shipped settings (no ignore_startup_parameters) refuse
// startup parameters other than the few it tracks itself, such as a
// RuntimeParams entry a pgx config may carry.
func TestPgBouncerRefusesUnknownStartupParameters(t *testing.T) {
	t.Parallel()
	bouncer := startBouncer(t, PgBouncerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cfg, err := pgx.ParseConfig(bouncer.URLFor("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["jit"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		conn.Close(ctx)
		t.Fatal("connecting with startup parameter jit=off succeeded, want pgbouncer to refuse it")
	}
	if !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("connecting with jit=off: %v, want pgbouncer's unsupported startup parameter", err)
	}
	t.Logf("jit=off: %v", err)

	// application_name is one it tracks: accepted, and any database name
	// passes through to the cluster.
	cfg, err = pgx.ParseConfig(bouncer.URLFor("template1"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "pgbouncer-test"
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connecting with application_name to template1: %v", err)
	}
	defer conn.Close(ctx)
	var db string
	if err := conn.QueryRow(ctx, "select current_database()", pgx.QueryExecModeSimpleProtocol).Scan(&db); err != nil || db != "template1" {
		t.Fatalf("current_database() = %q, %v; want template1", db, err)
	}
}

func TestPgBouncerNeedsTheTestStartedServer(t *testing.T) {
	t.Parallel()
	_, err := StartPgBouncer(&Postgres{URL: "postgres://postgres@db.example:5432/postgres"}, PgBouncerOptions{})
	if err == nil || !strings.Contains(err.Error(), "test-started") {
		t.Fatalf("StartPgBouncer without a port: %v, want an error saying it needs the test-started server", err)
	}
}
