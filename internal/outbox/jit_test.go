package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/testenv"
)

// millionRows is the size of the outbox shapes the plans are read on.
const millionRows = 1_000_000

// defaultJITAboveCost is PostgreSQL's default jit_above_cost: a statement
// costed above it is compiled wherever jit is on at its defaults.
const defaultJITAboveCost = 100_000

// oneTenantLoadSQL: one organization with one connection, 1M rows, about
// 9,600 of them due (queued, each its own purchase order), the rest
// completed: the shape whose generic claim plan was costed above
// jit_above_cost (bench/results.md).
const oneTenantLoadSQL = `
insert into integration_connections (id, organization_id, provider, config_json)
values ('00000000-0000-4000-9000-000000000001', '00000000-0000-4000-8000-000000000001', 'sandbox', '{}');
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, completed_at, created_at)
select '00000000-0000-4000-8000-000000000001', '00000000-0000-4000-9000-000000000001', 'sandbox',
    'push_purchase_order', 'purchase_order', gen_random_uuid(), '{"externalSupplierId": "S"}', 'k-' || g,
    case when g % 104 = 0 then 'queued' else 'completed' end, 0,
    case when g % 104 <> 0 then now() end, now() - make_interval(secs => $1::int - g)
from generate_series(1, $1::int) g`

// followedOrder is the purchase order whose commands the followers shape
// holds behind one in flight.
const followedOrder = "00000000-0000-4000-a000-000000000001"

// followersLoadSQL adds to the one-tenant shape a purchase order with one
// command in flight and 10,000 queued commands behind it, older than every
// other due row.
const followersLoadSQL = `
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
    lease_expires_at, claim_token, created_at)
select '00000000-0000-4000-8000-000000000001', '00000000-0000-4000-9000-000000000001', 'sandbox',
    'push_purchase_order', 'purchase_order', '00000000-0000-4000-a000-000000000001', '{"externalSupplierId": "S"}',
    'follower-' || g, case when g = 0 then 'processing' else 'queued' end, case when g = 0 then 1 else 0 end,
    case when g = 0 then now() + interval '15 minutes' end, case when g = 0 then gen_random_uuid() end,
    now() - interval '30 days' + make_interval(secs => g)
from generate_series(0, 10000) g`

// manyTenantsLoadSQL: 1,000 organizations with a connection each, 1M rows,
// 10,000 due (3 in 4 queued, 1 in 4 failed and due again), 500 leased, the
// rest completed.
const manyTenantsLoadSQL = `
insert into integration_connections (id, organization_id, provider, config_json)
select ('00000000-0000-4000-9000-' || lpad(g::text, 12, '0'))::uuid,
    ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'sandbox', '{}'
from generate_series(0, 999) g;
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at,
    lease_expires_at, claim_token, completed_at, created_at)
select ('00000000-0000-4000-8000-' || lpad(((g / 100) % 1000)::text, 12, '0'))::uuid,
    ('00000000-0000-4000-9000-' || lpad(((g / 100) % 1000)::text, 12, '0'))::uuid, 'sandbox',
    'push_purchase_order', 'purchase_order', gen_random_uuid(), '{"externalSupplierId": "S"}', 'k-' || g,
    case when g % 400 = 0 then 'failed' when g % 100 = 0 then 'queued' when g % 2000 = 1 then 'processing'
         else 'completed' end,
    case when g % 400 = 0 then 2 when g % 2000 = 1 then 1 else 0 end,
    case when g % 400 = 0 then now() - interval '1 minute' end,
    case when g % 2000 = 1 then now() + interval '15 minutes' end,
    case when g % 2000 = 1 then gen_random_uuid() end,
    case when g % 100 <> 0 and g % 2000 <> 1 then now() end,
    now() - make_interval(secs => $1::int - g)
from generate_series(1, $1::int) g`

// lowerAllVisibleSQL leaves about 9% of the outbox's pages all-visible: one
// row updated on 91 pages in 100 (what a bulk load, a restore or VACUUM
// FULL leaves).
const lowerAllVisibleSQL = `
update external_integration_outbox set updated_at = now()
where ctid = any (array(
    select format('(%s,1)', p)::tid
    from generate_series(0, pg_relation_size('external_integration_outbox') / current_setting('block_size')::int - 1) p
    where p % 100 >= 9))`

// plannedStatement is one statement's plan as auto_explain logged it.
type plannedStatement struct {
	Query string
	Cost  float64 // the planner's estimate of the whole statement
	Took  float64 // its actual execution, ms (instrumented)
	JIT   bool    // a JIT: section: the statement was compiled
	Plan  map[string]any
}

// planRecorder collects the plans auto_explain sends a connection as LOG
// notices (client_min_messages = log).
type planRecorder struct {
	mu    sync.Mutex
	plans []plannedStatement
	errs  []error
}

func (r *planRecorder) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	text, ok := strings.CutPrefix(n.Message, "duration: ")
	if !ok {
		return
	}
	_, text, _ = strings.Cut(text, "plan:")
	var p struct {
		Query string         `json:"Query Text"`
		Plan  map[string]any `json:"Plan"`
		JIT   map[string]any `json:"JIT"`
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &p); err != nil {
		r.errs = append(r.errs, fmt.Errorf("reading auto_explain's plan: %w", err))
		return
	}
	cost, _ := p.Plan["Total Cost"].(float64)
	took, _ := p.Plan["Actual Total Time"].(float64)
	r.plans = append(r.plans, plannedStatement{Query: p.Query, Cost: cost, Took: took, JIT: p.JIT != nil, Plan: p.Plan})
}

func (r *planRecorder) take() ([]plannedStatement, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	plans, errs := r.plans, r.errs
	r.plans, r.errs = nil, nil
	return plans, errs
}

// jitDatabase returns a fresh migrated database on which JIT is available
// and compiles everything a connection without our settings runs
// (jit_above_cost 0; inlining and optimization left out, so that a failure
// stays quick), loaded by load and vacuumed and analysed.
func jitDatabase(t *testing.T, load string) *testenv.Fixture {
	t.Helper()
	ctx := context.Background()
	f := pg.NewDB(t)
	var name string
	var available bool
	if err := f.Pool.QueryRow(ctx, "select current_database(), pg_jit_available()").Scan(&name, &available); err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Fatal("JIT is not available on the test cluster (llvmjit.so of postgresql-15 missing): this test could not fail")
	}
	db := pgx.Identifier{name}.Sanitize()
	for _, set := range []string{"jit = on", "jit_above_cost = 0", "jit_inline_above_cost = 100000000", "jit_optimize_above_cost = 100000000"} {
		if _, err := f.Pool.Exec(ctx, "alter database "+db+" set "+set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Pool.Exec(ctx, strings.ReplaceAll(load, "$1::int", fmt.Sprint(millionRows))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pool.Exec(ctx, "vacuum (analyze) external_integration_outbox, integration_connections"); err != nil {
		t.Fatal(err)
	}
	return f
}

// ourPool opens a pool on f's database configured as the functions'
// (pgtx.Configure), whose connections send rec every plan they run.
func ourPool(t *testing.T, f *testenv.Fixture, rec *planRecorder) *pgxpool.Pool {
	return testenv.OpenPool(t, f.URL, func(cfg *pgxpool.Config) {
		pgtx.Configure(cfg.ConnConfig)
		cfg.MaxConns = 1
		cfg.ConnConfig.OnNotice = rec.notice
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, `load 'auto_explain';
				set auto_explain.log_min_duration = 0; set auto_explain.log_analyze = on;
				set auto_explain.log_nested_statements = on;
				set auto_explain.log_format = json; set client_min_messages = log`)
			return err
		}
	})
}

// hostCompiles checks that a connection without our settings (the host's)
// on f's database JIT-compiles a statement: the database's settings are in
// force, so a statement of ours would be compiled too without them.
func hostCompiles(t *testing.T, f *testenv.Fixture) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var plan string
	if err := conn.QueryRow(ctx, `explain (analyze, format json)
		select count(*) from external_integration_outbox where attempt_count < 10`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, `"JIT"`) {
		t.Fatalf("a host connection's statement was not JIT-compiled on a database with jit on and jit_above_cost 0: this test could not fail: %s", plan)
	}
}

// runStatements runs the outbox's statements through s as the functions
// run them, in one transaction rolled back at the end (so the shape stays
// as loaded): the idle check, the sweep, the scheduled claim, the start and
// the record of what it claimed (the successes, then a failure), the listed claim of up to 50 other due
// rows and their release (the oldest 50 queued rows but the followers', as a rerun lists
// rows that failed before the newer ones were queued).
func runStatements(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	s := outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	p := outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: 15 * time.Minute, MaxInFlight: 5000, ConnectionMaxInFlight: 10}
	if idle, err := s.Idle(ctx, p); err != nil || idle {
		t.Fatalf("Idle = %v, %v; want false: rows are due", idle, err)
	}
	if _, err := s.DeadLetterExpired(ctx, p); err != nil {
		t.Fatal(err)
	}
	b, err := s.ClaimBatch(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	endClaim(t, tx)
	if len(b.Claims) < 2 {
		t.Fatalf("the scheduled claim took %d rows, want 2 or more", len(b.Claims))
	}
	// A batch of successes (record_completed), then one with a failure (record).
	last := len(b.Claims) - 1
	finish(t, s, b.Claims[:last], outbox.StatusCompleted, outbox.CircuitSuccess)
	finish(t, s, b.Claims[last:], outbox.StatusFailed, outbox.CircuitFailure)
	rows, err := tx.Query(ctx, `select id::text from external_integration_outbox
		where status = 'queued' and local_entity_id <> $1 order by created_at limit 50`, followedOrder)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	lp := p
	lp.IDs = listed
	lb, err := s.ClaimBatch(ctx, lp)
	if err != nil {
		t.Fatal(err)
	}
	endClaim(t, tx)
	if len(lb.Claims) == 0 {
		t.Fatal("the listed claim took nothing")
	}
	if _, err := s.Release(ctx, lb.Claims); err != nil {
		t.Fatal(err)
	}
}

// endClaim gives tx back the session's settings the claim's set-up changed
// for the rest of the transaction (the functions run each claim in its own
// transaction), so that the statements after it run as the functions run
// them.
func endClaim(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if _, err := tx.Exec(context.Background(), `set local jit to default; set local plan_cache_mode to default;
		set local enable_bitmapscan to default`); err != nil {
		t.Fatal(err)
	}
}

// TestNoStatementOfOursIsJITCompiled runs the outbox's statements (the
// idle check, the sweep, both claims, start, both records, release) on 1M-row
// outboxes of four shapes (one tenant; one tenant with 10,000 commands of one purchase order
// behind its command in flight; 1,000 tenants; 1,000 tenants with 9% of
// the pages all-visible), on databases where JIT is on and compiles every
// statement whatever its cost (jit_above_cost 0), through a pool set up as
// the functions' pool. auto_explain reads back each statement's plan (those
// the routines run too): no statement run in its routine (which sets jit
// off, where our connections can set nothing: a pooler would refuse or pin
// it) has a JIT: section, and no statement of ours is costed above
// PostgreSQL's default jit_above_cost, so that one sent plain is compiled
// only where the host lowered it. Each
// plan's estimated cost and actual time are logged (-v) for
// bench/results.md; wall-clock times are not asserted.
func TestNoStatementOfOursIsJITCompiled(t *testing.T) {
	t.Parallel()
	routines := map[string]bool{}
	for _, r := range outbox.Routines() {
		routines[strings.TrimPrefix(r.Name, "outbox/")] = true
	}
	check := func(t *testing.T, shape string, f *testenv.Fixture) {
		t.Helper()
		rec := &planRecorder{}
		runStatements(t, ourPool(t, f, rec))
		plans, errs := rec.take()
		for _, err := range errs {
			t.Error(err)
		}
		seen := map[string]bool{}
		for _, p := range plans {
			name, ours := statementName(p.Query)
			if !ours {
				continue // the test's own look-up
			}
			seen[name] = true
			t.Logf("%s: %s: estimated cost %.0f, actual %.2f ms, JIT %v", shape, name, p.Cost, p.Took, p.JIT)
			if p.JIT && routines[name] {
				t.Errorf("%s: %s was JIT-compiled in its routine (which sets jit off)", shape, name)
			}
			if p.Cost >= defaultJITAboveCost {
				t.Errorf("%s: %s is costed at %.0f, above PostgreSQL's default jit_above_cost (%d), for %.2f ms of work",
					shape, name, p.Cost, defaultJITAboveCost, p.Took)
			}
		}
		for _, want := range []string{"idle", "claim_lock", "claim_scheduled", "claim_listed", "dead_letter_expired", "start", "record", "record_completed", "release"} {
			if !seen[want] {
				t.Errorf("%s: auto_explain logged no plan of %s (logged: %v)", shape, want, seen)
			}
		}
	}
	t.Run("one tenant", func(t *testing.T) {
		t.Parallel()
		f := jitDatabase(t, oneTenantLoadSQL)
		hostCompiles(t, f)
		check(t, "one tenant", f)
		if _, err := f.Pool.Exec(context.Background(), followersLoadSQL+"; analyze external_integration_outbox"); err != nil {
			t.Fatal(err)
		}
		check(t, "one tenant, 10k followers behind one entity", f)
	})
	t.Run("many tenants", func(t *testing.T) {
		t.Parallel()
		f := jitDatabase(t, manyTenantsLoadSQL)
		hostCompiles(t, f)
		check(t, "1,000 tenants", f)
		if _, err := f.Pool.Exec(context.Background(), lowerAllVisibleSQL+"; analyze external_integration_outbox"); err != nil {
			t.Fatal(err)
		}
		var share float64
		if err := f.Pool.QueryRow(context.Background(), `select relallvisible::float8 / greatest(relpages, 1) from pg_class
			where oid = 'external_integration_outbox'::regclass`).Scan(&share); err != nil || share > 0.12 {
			t.Fatalf("all-visible share %.2f (%v), want about 9%%", share, err)
		}
		check(t, "1,000 tenants, 9% all-visible", f)
	})
}

// statementName names one of the outbox's statements by its text, as sent;
// ours is false for any other statement.
func statementName(query string) (name string, ours bool) {
	for _, s := range outbox.Statements() {
		if strings.TrimSpace(query) == strings.TrimSpace(sqlfile.Positional(s.SQL)) {
			return strings.TrimPrefix(s.Name, "outbox/"), true
		}
	}
	return "", false
}
