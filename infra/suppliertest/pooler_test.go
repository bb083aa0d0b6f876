package suppliertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/app"
	"integration-outbox/internal/migrate"
	"integration-outbox/internal/testenv"
)

// poolerServers is the pooler's server connections a database: fewer than
// the clients the test runs through it (the host, dispatch, three push
// containers, rerun and inspect, two connections each).
const poolerServers = 3

// TestTheWholePipelineRunsThroughPgBouncer: the functions and the host reach
// PostgreSQL through PgBouncer in transaction mode with its shipped
// settings and 3 server connections, as most hosted PostgreSQL hands it
// out. make migrate, which holds a session, refuses it and changes
// nothing; run directly, it installs the schema. Then, all through the
// pooler: the host enqueues 5 suppliers, 15 purchase orders naming them and
// a second push of two orders (an edit); dispatch and three push containers
// deliver them (the suppliers first, each order once, the edit after the
// order's first push, as an update); an operator reruns a dead-lettered
// order and previews another through inspect; retention deletes an old
// row. No statement fails, and no
// server connection of the pool holds anything of ours afterwards: no
// prepared statement, session setting, advisory lock, temporary table or
// LISTEN (the check is shown to see a prepared statement and a SET first).
func TestTheWholePipelineRunsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bouncer, err := testenv.StartPgBouncer(pg, testenv.PgBouncerOptions{DefaultPoolSize: poolerServers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bouncer.Stop)
	via := func(url string) string {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		return bouncer.URLFor(cfg.Database)
	}
	shape := standIn()

	// make migrate through the pooler: refused before anything changes.
	// The same database shows that serverState sees what a client leaves.
	bare := pg.CreateHostDatabase(t, shape)
	err = migrate.Up(ctx, via(bare))
	if err == nil || !strings.Contains(err.Error(), "transaction pooler") || !strings.Contains(err.Error(), "Nothing was changed") {
		t.Fatalf("make migrate through PgBouncer in transaction mode = %v, want a refusal naming the pooler", err)
	}
	if v, err := migrate.CurrentVersion(ctx, bare); err != nil || v != 0 {
		t.Fatalf("schema version after the refusal: %d, %v; want 0 (nothing applied)", v, err)
	}
	leaky := pooledConn(t, via(bare))
	if _, err := leaky.Exec(ctx, "prepare leak as select 1; set work_mem = '8MB'", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if left := serverState(t, via(bare)); !strings.Contains(strings.Join(left, "\n"), "1 prepared statement") ||
		!strings.Contains(strings.Join(left, "\n"), "work_mem") {
		t.Fatalf("the server-state check did not see a client's prepared statement and SET: %v", left)
	}

	s := newStackVia(t, shape, via)
	s.env["DATABASE_POOL_SIZE"] = "2"
	type container struct {
		a         *app.App
		orders    queue
		suppliers queue
	}
	var containers []container
	for range 3 {
		c := container{a: s.container(t)}
		c.orders.url, c.suppliers.url = s.orders.url, s.suppliers.url
		if c.orders.worker, err = c.a.PushWorker(); err != nil {
			t.Fatal(err)
		}
		if c.suppliers.worker, err = c.a.PushSupplierWorker(); err != nil {
			t.Fatal(err)
		}
		containers = append(containers, c)
	}
	drainAll := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, len(containers))
		for _, c := range containers {
			wg.Go(func() {
				for range 3 { // a message sent while another container drained
					for _, q := range []queue{c.orders, c.suppliers} {
						if err := s.tryDrain(q); err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("push: %v\n%s", err, s.logs.String())
		}
	}
	dispatcher, err := s.container(t).Dispatcher(s.sqs)
	if err != nil {
		t.Fatal(err)
	}
	runUntilIdle := func() {
		t.Helper()
		for range 15 {
			sum, err := dispatcher.Handle(ctx, json.RawMessage(`{}`))
			if err != nil {
				t.Fatalf("dispatch: %v\n%s", err, s.logs.String())
			}
			drainAll()
			if sum.Claimed == 0 {
				return
			}
		}
		t.Fatalf("still claiming after 15 dispatch runs\n%s", s.logs.String())
	}

	suppliers, supplierRows := s.newSuppliers(t, 5)
	var orderRows []string
	edits := map[string]string{} // the edit's row → the order's first row
	for i := range 15 {
		order, r := s.order(t, fmt.Sprintf("PO-%02d", i), suppliers[i%5])
		orderRows = append(orderRows, r)
		if i < 2 {
			var edit string
			if err := s.conn.QueryRow(ctx, `select integration_outbox_enqueue($1, $2, 'push_purchase_order', 'purchase_order',
				$3, $4::jsonb, $5)::text`, s.org, s.connID, order, fmt.Sprintf(`{"supplierId": %q}`, suppliers[i%5]),
				"purchase_order:"+order+":edit").Scan(&edit); err != nil {
				t.Fatal(err)
			}
			edits[edit] = r
		}
	}
	runUntilIdle()

	for i, r := range supplierRows {
		if got := s.row(t, r); got.status != "completed" || got.providerStatus != "created" {
			t.Errorf("push_supplier %d = %+v, want completed (created)", i, got)
		}
	}
	for i, r := range orderRows {
		if got := s.row(t, r); got.status != "completed" || got.reference == "" {
			t.Errorf("order %d = %+v, want completed with its PurchaseOrderID", i, got)
		}
	}
	for edit, first := range edits {
		if got, was := s.row(t, edit), s.row(t, first); got.status != "completed" || got.reference != was.reference {
			t.Errorf("the edit of an order = %+v, want completed on the document its first push made (%s)", got, was.reference)
		}
		var inOrder bool
		if err := s.conn.QueryRow(ctx, `select e.claimed_at >= f.completed_at from external_integration_outbox e,
			external_integration_outbox f where e.id = $1 and f.id = $2`, edit, first).Scan(&inOrder); err != nil || !inOrder {
			t.Errorf("the edit was claimed before the order's first push ended (%v): per-entity order broken", err)
		}
	}
	if n := len(s.xero.Contacts()); n != 5 {
		t.Errorf("Xero holds %d contacts, want 5", n)
	}
	if n := len(s.xero.Orders()); n != 15 {
		t.Errorf("Xero holds %d purchase orders, want 15 (each once)", n)
	}
	if n := s.xero.Counts()["200 OK (update)"]; n != len(edits) {
		t.Errorf("Xero answered %d updates, want %d (the edits)", n, len(edits))
	}

	// An operator reruns a dead-lettered order from the console, and
	// previews another.
	if _, err := s.conn.Exec(ctx, `update external_integration_outbox set status = 'dead_letter' where id = $1`, orderRows[5]); err != nil {
		t.Fatal(err)
	}
	ops := s.container(t)
	rerunner, err := ops.Rerunner(s.sqs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rerunner.Handle(ctx, json.RawMessage(fmt.Sprintf(`{"organizationId": %q, "outboxIds": [%q], "resetAttempts": true,
		"dispatchNow": true, "reason": "pooler test", "requestedBy": "ops@example.com"}`, s.org, orderRows[5])))
	if err != nil || len(res.Requeued) != 1 || res.Dispatched != 1 {
		t.Fatalf("rerun = %+v, %v; want the row requeued and dispatched\n%s", res, err, s.logs.String())
	}
	drainAll()
	if got := s.row(t, orderRows[5]); got.status != "completed" || got.attempts != 1 {
		t.Errorf("the rerun order = %+v, want completed after one attempt (its attempts reset)", got)
	}
	if n, u := len(s.xero.Orders()), s.xero.Counts()["200 OK (update)"]; n != 15 || u != len(edits)+1 {
		t.Errorf("Xero holds %d purchase orders and answered %d updates after the rerun, want 15 and %d (the rerun updates its document)",
			n, u, len(edits)+1)
	}
	resp, err := ops.Inspector().Handle(ctx, json.RawMessage(fmt.Sprintf(`{"organizationId": %q, "outboxId": %q, "preview": true}`,
		s.org, orderRows[7])))
	if err != nil || !resp.Found || resp.Preview == nil || len(resp.Attempts) == 0 {
		t.Errorf("inspect with preview = found %v, preview %v, %d attempts, %v", resp.Found, resp.Preview != nil, len(resp.Attempts), err)
	}

	// Retention through the pooler (its batch timeouts run in its
	// routine): one completed row made two hours old.
	if _, err := s.conn.Exec(ctx, `update external_integration_outbox set completed_at = now() - interval '2 hours'
		where id = $1`, orderRows[9]); err != nil {
		t.Fatal(err)
	}
	s.env["RETENTION_AGE"] = "1h"
	sweeper, err := s.container(t).Sweeper()
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sweeper.Run(ctx); err != nil || res.Deleted != 1 {
		t.Errorf("retention through the pooler = %+v, %v; want the one row completed two hours ago deleted", res, err)
	}

	for _, bad := range []string{"prepared statement", "SQLSTATE 26000", "unsupported startup parameter", "SQLSTATE 08P01"} {
		if strings.Contains(s.logs.String(), bad) {
			t.Errorf("the functions logged %q through the pooler:\n%s", bad, s.logs.String())
		}
	}
	if left := serverState(t, s.env["DATABASE_URL"]); len(left) > 0 {
		t.Errorf("the pool's server connections hold what our statements left:\n%s", strings.Join(left, "\n"))
	}
}

// pooledConn connects through the pooler at url as a client that sends no
// named statement.
func pooledConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// serverState opens poolerServers clients through the pooler at url, each in
// a transaction, so that together they hold every server connection of the
// database's pool, and returns what each server connection holds beyond a
// transaction: prepared statements, settings made with SET (source
// "session"; not those PgBouncer itself sets to match a client: the
// encoding, date style, time zone and application name), advisory locks,
// temporary tables, LISTEN channels.
func serverState(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	pids := map[int32]bool{}
	for range poolerServers {
		tx, err := pooledConn(t, url).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var pid int32
		var prepared, advisory, temporary, listening int
		var settings string
		if err := tx.QueryRow(ctx, `select pg_backend_pid(), (select count(*) from pg_prepared_statements),
			(select count(*) from pg_locks where locktype = 'advisory' and pid = pg_backend_pid()),
			(select count(*) from pg_class where relpersistence = 't'), (select count(*) from pg_listening_channels()),
			coalesce((select string_agg(name || '=' || setting, ', ') from pg_settings where source = 'session'
			    and name not in ('client_encoding', 'DateStyle', 'TimeZone', 'application_name', 'standard_conforming_strings')), '')`).
			Scan(&pid, &prepared, &advisory, &temporary, &listening, &settings); err != nil {
			t.Fatal(err)
		}
		pids[pid] = true
		if prepared+advisory+temporary+listening > 0 || settings != "" {
			left = append(left, fmt.Sprintf("server backend %d: %d prepared statement(s), %d advisory lock(s), %d temporary table(s), %d channel(s), session settings %q",
				pid, prepared, advisory, temporary, listening, settings))
		}
	}
	if len(pids) != poolerServers {
		t.Fatalf("%d clients in transactions met %d server backends, want %d: the check did not reach every server connection",
			poolerServers, len(pids), poolerServers)
	}
	return left
}

// TestMakeMigrateThroughASessionPooler: make migrate refuses a transaction
// pooler only; through PgBouncer in session mode (each client keeps its
// server connection) it installs the schema and the routines.
func TestMakeMigrateThroughASessionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bouncer, err := testenv.StartPgBouncer(pg, testenv.PgBouncerOptions{PoolMode: "session", DefaultPoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bouncer.Stop)
	shape := standIn()
	url := pg.CreateHostDatabase(t, shape)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, bouncer.URLFor(cfg.Database)); err != nil {
		t.Fatalf("make migrate through PgBouncer in session mode: %v", err)
	}
	conn := pooledConn(t, url)
	var routines int
	if err := conn.QueryRow(ctx, `select count(*) from pg_proc where proname like 'integration\_outbox\_sql\_%'`).Scan(&routines); err != nil || routines == 0 {
		t.Fatalf("routines installed through the session pooler: %d, %v", routines, err)
	}
}
