package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/bench/overload"
	"integration-outbox/internal/outbox"
)

// fairClaimSize is the fair, capped claim at one outbox size.
type fairClaimSize struct {
	// Shared: one due row in ten shares its entity with another.
	Shared bool
	// OneTenant: every row is one organization's, on one connection.
	OneTenant       bool
	Rows, Due, Orgs int
	Samples         []time.Duration
	// Server is the claim statement's server side over the measured
	// claims (pg_stat_statements).
	Server claimServer
}

func (f fairClaimSize) median() time.Duration { return median(f.Samples) }

const (
	fairClaimOrgs     = 1000
	fairClaimDue      = 10_000
	fairClaimInFlight = 500 // leased rows in flight when the claim runs
	fairClaimOpen     = 50  // connections whose circuit is open
)

// loadFairOutbox loads rows outbox rows over fairClaimOrgs organizations
// (one connection each): fairClaimDue due rows spread evenly (3 in 4
// queued, 1 in 4 failed with a past next_attempt_at), fairClaimInFlight
// leased, the rest completed; fairClaimOpen connections with an open
// circuit. With shared, one due row in ten shares its entity with another
// due row of its connection (pairs of the k-th and (k+1000)-th due rows), so
// per-entity order holds the newer of each pair back. settle then prepares
// the tables for the measurement.
func loadFairOutbox(ctx context.Context, conn *pgx.Conn, rows int, shared bool) error {
	every := rows / fairClaimDue
	lease := rows / fairClaimInFlight
	stmts := []struct {
		sql  string
		args []any
	}{
		{`insert into integration_connections (organization_id, provider, config_json)
		  select gen_random_uuid(), 'sandbox', '{}' from generate_series(1, $1::int)`, []any{fairClaimOrgs}},
		{`with c as (select id, organization_id, (row_number() over (order by id) - 1)::int as n from integration_connections)
		  insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		      local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at,
		      lease_expires_at, claim_token, provider_status, completed_at, created_at, updated_at)
		  select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order',
		      case when $5::bool and g % $2 = 0 and (g / $2) % 10 = 0
		           then md5('shared-' || ((g / $2) % $4) || '-' || ((g / $2) / (2 * $4)))::uuid
		           else gen_random_uuid() end,
		      '{"externalSupplierId": "SUP-1"}', 'idem-' || g,
		      case when g % $2 = 0 then case when g % (4 * $2) = 0 then 'failed' else 'queued' end
		           when g % $3 = 1 then 'processing' else 'completed' end,
		      case when g % $2 = 0 and g % (4 * $2) = 0 then 2 else 1 end,
		      case when g % (4 * $2) = 0 then now() - interval '1 minute' end,
		      case when g % $2 <> 0 and g % $3 = 1 then now() + interval '15 minutes' end,
		      case when g % $2 <> 0 and g % $3 = 1 then gen_random_uuid() end,
		      case when g % $2 <> 0 and g % $3 <> 1 then 'completed' end,
		      case when g % $2 <> 0 and g % $3 <> 1 then t.ts + interval '2 seconds' end,
		      t.ts, t.ts
		  from generate_series(1, $1::int) g
		  cross join lateral (select now() - make_interval(secs => $1::int - g) as ts) t
		  join c on c.n = (g / $2) % $4`, []any{rows, every, lease, fairClaimOrgs, shared}},
		{`insert into integration_outbox_connection_health (connection_id, organization_id, consecutive_failures,
		      opened_count, open_until, opened_at)
		  select id, organization_id, 5, 1, now() + interval '1 hour', now()
		  from integration_connections order by id limit $1`, []any{fairClaimOpen}},
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("loading %d outbox rows: %w", rows, err)
		}
	}
	return nil
}

// fairClaimTables are the tables the fair claim reads.
var fairClaimTables = []string{"integration_connections", "integration_outbox_connection_health", "external_integration_outbox"}

// quietWait bounds how long settle waits for the database's other sessions
// (autovacuum workers) to finish.
const quietWait = 2 * time.Minute

// settle brings freshly loaded tables to the state every measured claim
// should meet, however busy the cluster was before (in make bench the claim
// scaling has just loaded, cloned and dropped three 1M-row databases):
// every page all-visible, so that the claim's index-only scans do not visit
// the heap, and nothing else running in the database.
//
// The test cluster runs with synchronous_commit off, and PostgreSQL sets
// the commit hint bit of a row (VACUUM marks a page all-visible only when
// every row on it has it) only once the WAL is flushed up to the newest
// commit among the 32 transactions sharing the row's CLOG slot. An
// asynchronous commit right before VACUUM, such as the ANALYZE of the
// previous table, is enough to leave every page of a table not
// all-visible. So settle commits synchronously, switches autovacuum off on
// each table, waits until no other session (autovacuum worker) works in the
// database, and then runs CHECKPOINT and VACUUM of every table, then
// ANALYZE, until every page is all-visible (at most settleTries times, a
// second apart); a last CHECKPOINT writes what VACUUM dirtied. It warns
// when pages are left not all-visible.
func settle(ctx context.Context, log *slog.Logger, conn *pgx.Conn, tables []string) error {
	if _, err := conn.Exec(ctx, "set synchronous_commit = on"); err != nil {
		return fmt.Errorf("switching synchronous commit on: %w", err)
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, "alter table "+pgx.Identifier{t}.Sanitize()+" set (autovacuum_enabled = false)"); err != nil {
			return fmt.Errorf("switching autovacuum off on %s: %w", t, err)
		}
	}
	for try := 1; ; try++ {
		if err := waitQuiet(ctx, log, conn); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "checkpoint"); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		for _, cmd := range []string{"vacuum", "analyze"} {
			for _, t := range tables {
				if _, err := conn.Exec(ctx, cmd+" "+pgx.Identifier{t}.Sanitize()); err != nil {
					return fmt.Errorf("%s %s: %w", cmd, t, err)
				}
			}
		}
		left, err := notAllVisible(ctx, conn, tables)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			log.Info("tables settled", "vacuums", try)
			break
		}
		if try == settleTries {
			log.Warn("tables settled with pages not all-visible", "vacuums", try, "notAllVisible", left,
				"xminHolders", xminHolders(ctx, conn))
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if _, err := conn.Exec(ctx, "checkpoint"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return waitQuiet(ctx, log, conn)
}

// settleTries bounds the VACUUM rounds of settle.
const settleTries = 5

// xminHolders describes what in the cluster holds back the horizon VACUUM
// may clean up to (sessions with a snapshot or a transaction id, prepared
// transactions, replication slots), for the warning of settle.
func xminHolders(ctx context.Context, conn *pgx.Conn) []string {
	rows, err := conn.Query(ctx, `
		select format('%s pid %s in %s: xmin %s xid %s, %s', backend_type, pid, coalesce(datname, '-'),
		    backend_xmin, backend_xid, left(query, 60))
		from pg_stat_activity where pid <> pg_backend_pid() and (backend_xmin is not null or backend_xid is not null)
		union all select format('prepared %s in %s', gid, database) from pg_prepared_xacts
		union all select format('slot %s: xmin %s', slot_name, xmin) from pg_replication_slots`)
	if err != nil {
		return []string{err.Error()}
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return []string{err.Error()}
	}
	return out
}

// notAllVisible lists the tables with pages VACUUM has not marked
// all-visible, as "table: all-visible/pages".
func notAllVisible(ctx context.Context, conn *pgx.Conn, tables []string) ([]string, error) {
	var left []string
	for _, t := range tables {
		var pages, visible int64
		if err := conn.QueryRow(ctx, `select relpages, relallvisible from pg_class where oid = $1::regclass`, t).Scan(&pages, &visible); err != nil {
			return nil, fmt.Errorf("reading the visibility of %s: %w", t, err)
		}
		if visible < pages {
			left = append(left, fmt.Sprintf("%s: %d/%d", t, visible, pages))
		}
	}
	return left, nil
}

// waitQuiet polls until no other session of the cluster works in conn's
// database (autovacuum workers included) and no vacuum is in progress
// there, for at most quietWait; past that it logs what still runs and goes
// on.
func waitQuiet(ctx context.Context, log *slog.Logger, conn *pgx.Conn) error {
	deadline := time.Now().Add(quietWait)
	for {
		rows, err := conn.Query(ctx, `
			select backend_type || coalesce(': ' || left(query, 80), '') from pg_stat_activity
			where datname = current_database() and pid <> pg_backend_pid()
			union all
			select 'vacuum of ' || relid::regclass::text from pg_stat_progress_vacuum
			where datname = current_database() and pid <> pg_backend_pid()`)
		var busy []string
		if err == nil {
			busy, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return fmt.Errorf("reading the database's sessions: %w", err)
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			log.Warn("database not quiet, measuring anyway", "waited", quietWait, "sessions", busy)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fairClaimWarmup is the unmeasured claims at each size: one whole turn of
// the rotating start over the organizations, so that every organization's
// index pages have been read once before the clock runs.
const fairClaimWarmup = fairClaimOrgs / claimLimit

// measureFairClaims measures the claim of 50 with every limit on
// (DISPATCH_MAX_IN_FLIGHT 5,000 with 500 in flight, CONNECTION_MAX_IN_FLIGHT
// 10, 50 open circuits, organizations interleaved from a rotating start) at
// each size, each claim in a rolled-back transaction. Every size is loaded
// and settled first; then the sizes take turns claim by claim, as the
// variants of the claim scaling do, so drift on a noisy machine hits them
// alike.
func measureFairClaims(ctx context.Context, log *slog.Logger, env *benchEnv, sizes []int, runs int) ([]fairClaimSize, error) {
	conns := make([]*pgx.Conn, 0, len(sizes))
	defer func() {
		for _, c := range conns {
			url := c.Config().ConnString()
			c.Close(context.WithoutCancel(ctx))
			if err := env.dropDatabase(context.WithoutCancel(ctx), url); err != nil {
				log.Warn("dropping a fair-claim database", "error", err.Error())
			}
		}
	}()
	type load struct {
		rows              int
		shared, oneTenant bool
	}
	var loads []load
	for _, kind := range []load{{}, {shared: true}, {oneTenant: true}} {
		for _, rows := range sizes {
			loads = append(loads, load{rows, kind.shared, kind.oneTenant})
		}
	}
	for _, l := range loads {
		rows := l.rows
		url, err := env.pg.MigratedDatabase(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, errors.Join(err, env.dropDatabase(ctx, url))
		}
		conns = append(conns, conn)
		load := func() error { return loadFairOutbox(ctx, conn, rows, l.shared) }
		if l.oneTenant {
			load = func() error { return loadOneTenantOutbox(ctx, conn, rows) }
		}
		if err := load(); err != nil {
			return nil, err
		}
		if err := settle(ctx, log, conn, fairClaimTables); err != nil {
			return nil, fmt.Errorf("%d rows: %w", rows, err)
		}
	}
	out := make([]fairClaimSize, len(loads))
	after := make([]string, len(loads))
	for i, l := range loads {
		out[i] = fairClaimSize{Rows: l.rows, Shared: l.shared, OneTenant: l.oneTenant, Due: fairClaimDue, Orgs: fairClaimOrgs}
		if l.oneTenant {
			out[i].Orgs = 1
		}
		after[i] = "00000000-0000-0000-0000-000000000000"
	}
	for round := range fairClaimWarmup + runs {
		if round == fairClaimWarmup {
			for _, conn := range conns {
				if err := resetStatements(ctx, conn); err != nil {
					return nil, err
				}
			}
		}
		for i, conn := range conns {
			claim := fairClaimOnce
			if loads[i].oneTenant {
				claim = oneTenantClaimOnce
			}
			d, next, err := claim(ctx, conn, after[i])
			if err != nil {
				return nil, fmt.Errorf("%d rows (shared entities %v, one tenant %v): %w", loads[i].rows, loads[i].shared,
					loads[i].oneTenant, err)
			}
			after[i] = next
			if round >= fairClaimWarmup {
				out[i].Samples = append(out[i].Samples, d)
			}
		}
	}
	for i, conn := range conns {
		var err error
		if out[i].Server, err = readClaims(ctx, conn, runs); err != nil {
			return nil, err
		}
	}
	for _, f := range out {
		log.Info("fair claims measured", "rows", f.Rows, "sharedEntities", f.Shared, "oneTenant", f.OneTenant, "median", f.median(),
			"serverMsPerClaimedRow", f.Server.ExecMs/claimLimit)
	}
	return out, nil
}

func fairClaimOnce(ctx context.Context, conn *pgx.Conn, after string) (time.Duration, string, error) {
	return cappedClaimOnce(ctx, conn, after, "fair", 10, func(b outbox.Batch) error {
		orgs := map[string]bool{}
		for _, c := range b.Claims {
			orgs[c.OrganizationID] = true
		}
		if len(orgs) != claimLimit {
			return fmt.Errorf("fair claim of %d rows served %d organizations, want one row each", claimLimit, len(orgs))
		}
		return nil
	})
}

// oneTenantClaimOnce is fairClaimOnce on the one-tenant load: no
// connection cap (CONNECTION_MAX_IN_FLIGHT 0), so the claim takes its 50
// rows from the one connection.
func oneTenantClaimOnce(ctx context.Context, conn *pgx.Conn, after string) (time.Duration, string, error) {
	return cappedClaimOnce(ctx, conn, after, "one-tenant", 0, nil)
}

// cappedClaimOnce times one claim of claimLimit rows under the connection cap
// connectionCap, rolled back, and checks it took claimLimit rows (and, when
// check is set, what check says).
func cappedClaimOnce(ctx context.Context, conn *pgx.Conn, after, name string, connectionCap int,
	check func(outbox.Batch) error) (time.Duration, string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, "", err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	began := time.Now()
	// The breaker on, as the functions run it: the open circuits hold
	// their connections back.
	store := outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	b, err := store.ClaimBatch(ctx, outbox.ClaimParams{Limit: claimLimit, MaxAttempts: 10,
		Lease: 900 * time.Second, MaxInFlight: 5000, ConnectionMaxInFlight: connectionCap, After: after})
	took := time.Since(began)
	if err != nil {
		return 0, "", err
	}
	if len(b.Claims) != claimLimit {
		return 0, "", fmt.Errorf("%s claim took %d rows, want %d", name, len(b.Claims), claimLimit)
	}
	if check != nil {
		if err := check(b); err != nil {
			return 0, "", err
		}
	}
	return took, b.NextAfter(after), nil
}

// loadOneTenantOutbox loads rows outbox rows of one organization on one
// connection: fairClaimDue due rows spread evenly (queued, each its own
// purchase order), the rest completed; no row leased, no circuit open. It
// is the shape whose generic claim plan PostgreSQL costed above
// jit_above_cost.
func loadOneTenantOutbox(ctx context.Context, conn *pgx.Conn, rows int) error {
	every := rows / fairClaimDue
	if _, err := conn.Exec(ctx, `
		with c as (
		    insert into integration_connections (organization_id, provider, config_json)
		    values (gen_random_uuid(), 'sandbox', '{}') returning id, organization_id)
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
		    completed_at, created_at, updated_at)
		select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
		    '{"externalSupplierId": "SUP-1"}', 'idem-' || g,
		    case when g % $2 = 0 then 'queued' else 'completed' end, case when g % $2 = 0 then 0 else 1 end,
		    case when g % $2 <> 0 then t.ts + interval '2 seconds' end, t.ts, t.ts
		from generate_series(1, $1::int) g
		cross join c
		cross join lateral (select now() - make_interval(secs => $1::int - g) as ts) t`, rows, every); err != nil {
		return fmt.Errorf("loading %d outbox rows of one tenant: %w", rows, err)
	}
	return nil
}

// overloadRun is one scenario under both settings.
type overloadRun struct {
	Scenario overload.Scenario
	Today    overload.Result
	New      overload.Result
}

// overloadScenarios are the overload and outage scenarios, time scaled by scale: the
// 50,000-row backlog (20 tenants, 2 push invocations x batch 10, 2 s a call,
// lease 900 s) with a small tenant queuing one row 5 minutes in; one
// connection down (503) beside ten healthy tenants of 550 rows over an
// hour; and the same with calls to the broken one hanging until the 10 s
// provider timeout.
func overloadScenarios(backlogRows int, scale float64) []overload.Scenario {
	base := overload.Scenario{Scale: scale, Consumers: 2, BatchSize: 10, ProviderTimeout: 10 * time.Second,
		Lease: 900 * time.Second, DispatchEvery: time.Minute}
	backlog := base
	backlog.Name, backlog.Latency, backlog.Until, backlog.HealthyOnly = "backlog", 2*time.Second, 6*time.Hour, true
	for i := range 20 {
		backlog.Tenants = append(backlog.Tenants, overload.Tenant{Name: fmt.Sprintf("t%02d", i), Rows: backlogRows / 20})
	}
	backlog.Tenants = append(backlog.Tenants, overload.Tenant{Name: "small", Rows: 1, After: 5 * time.Minute})
	out := []overload.Scenario{backlog}
	for _, mode := range []overload.Mode{overload.Down, overload.Hanging} {
		sc := base
		sc.Name, sc.Latency, sc.Until = "one connection down (503)", 500*time.Millisecond, time.Hour
		if mode == overload.Hanging {
			sc.Name = "one connection hanging"
		}
		for i := range 10 {
			sc.Tenants = append(sc.Tenants, overload.Tenant{Name: fmt.Sprintf("h%02d", i), Rows: 550})
		}
		sc.Tenants = append(sc.Tenants, overload.Tenant{Name: "broken", Rows: 2000, Mode: mode})
		out = append(out, sc)
	}
	return out
}

func measureOverload(ctx context.Context, log *slog.Logger, env *benchEnv, backlogRows int, scale float64) ([]overloadRun, error) {
	var out []overloadRun
	for _, sc := range overloadScenarios(backlogRows, scale) {
		run := overloadRun{Scenario: sc}
		for _, st := range []overload.Settings{overload.Today(), overload.Defaults(sc.Consumers, sc.BatchSize)} {
			url, err := env.pg.MigratedDatabase(ctx)
			if err != nil {
				return out, err
			}
			res, err := overload.Run(ctx, url, sc, st)
			if derr := env.dropDatabase(ctx, url); derr != nil && err == nil {
				err = derr
			}
			if err != nil {
				return out, fmt.Errorf("%s, %s: %w", sc.Name, st.Name, err)
			}
			log.Info("overload scenario", "scenario", sc.Name, "settings", st.Name, "took", res.Took.Round(time.Second))
			if st.Legacy {
				run.Today = res
			} else {
				run.New = res
			}
		}
		out = append(out, run)
	}
	return out, nil
}

// overloadMarkdown renders the scenarios, today's settings beside the new
// defaults.
func overloadMarkdown(runs []overloadRun, fair []fairClaimSize) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if len(fair) > 0 {
		p("\n## Fair, capped claim\n\n")
		p("Claim of %d with organizations interleaved, DISPATCH_MAX_IN_FLIGHT 5,000 (%d leased), CONNECTION_MAX_IN_FLIGHT 10, %d open circuits; %d due rows across %d organizations.\n\n",
			claimLimit, fairClaimInFlight, fairClaimOpen, fairClaimDue, fairClaimOrgs)
		p("Each size is loaded into a fresh database; then autovacuum off on the claim's three tables, a wait (at most %s) until no other session (autovacuum worker) works in the database, then, committing synchronously (the cluster runs with `synchronous_commit=off`, and an unflushed asynchronous commit such as an `ANALYZE` keeps `VACUUM` from marking pages all-visible), `CHECKPOINT`, `VACUUM` and `ANALYZE` of each table until every page is all-visible (at most %d times, a second apart), and another `CHECKPOINT`, so the claims meet the same settled tables whatever ran in the cluster before; then the sizes take turns claim by claim: %d unmeasured claims each (one turn of the rotating start over the organizations), then the median of %d, each rolled back.\n\n",
			quietWait, settleTries, fairClaimWarmup, len(fair[0].Samples))
		p("Per-entity order is on (the default). The second load makes one due row in ten share its entity with another due row of its connection, so the claim passes over the newer of each pair. The third load puts every row in one organization and one connection (%d due, each its own entity, the rest completed, nothing leased, no circuit open) and claims with no connection cap (CONNECTION_MAX_IN_FLIGHT 0), so the claim takes its %d rows from one pair: the shape whose generic plan PostgreSQL once costed above `jit_above_cost`.\n\n", fairClaimDue, claimLimit)
		p("Server time per claimed row is the claim statement's mean execution time in `pg_stat_statements` over the measured claims, over the %d rows each claims (the claim's own transaction, its lock and the rollback are not in it).\n\n", claimLimit)
		p("| Due rows | Rows | Median claim | Server time per claimed row | Ratio to the smallest size of its load | Target |\n|---|---|---|---|---|---|\n")
		var first time.Duration
		for i, f := range fair {
			if i == 0 || f.Shared != fair[i-1].Shared || f.OneTenant != fair[i-1].OneTenant {
				first = f.median()
			}
			load := "each its own entity"
			switch {
			case f.Shared:
				load = "10% sharing an entity"
			case f.OneTenant:
				load = "one tenant, one connection, no connection cap"
			}
			p("| %s | %s | %s | %.3f ms | %s | ≤ 1.50× |\n", load, rows(f.Rows), ms(f.median()), f.Server.ExecMs/claimLimit,
				x(float64(f.median())/float64(first)))
		}
	}
	if len(runs) == 0 {
		return b.String()
	}
	p("\n## Overload and outages\n\n")
	p("The real dispatcher and push worker (`bench/overload`) against this PostgreSQL, an in-process queue and a simulated provider, time scaled by %.3g (simulated times below; the database's own time is not scaled, so a slow or loaded machine makes every claim and record look slower and the capped runs, which claim more often, pay most for it).", runs[0].Scenario.Scale)
	p(" Today: the claim before the in-flight caps (one global order, no caps, no breaker); new: DISPATCH_MAX_IN_FLIGHT 2 × invocations × batch = 40, CONNECTION_MAX_IN_FLIGHT 10, CIRCUIT_FAILURE_THRESHOLD 5, CIRCUIT_COOLDOWN 60 s. The lease-at-start fix is in both.\n\n")
	for _, r := range runs {
		p("### %s\n\n| Measure | Today | New |\n|---|---|---|\n", r.Scenario.Name)
		row := func(name string, f func(overload.Result) string) { p("| %s | %s | %s |\n", name, f(r.Today), f(r.New)) }
		row("rows", func(x overload.Result) string { return fmt.Sprint(x.Rows) })
		row("messages per row", func(x overload.Result) string { return fmt.Sprintf("%.2f", x.PerRow(x.Messages)) })
		row("attempts per row", func(x overload.Result) string { return fmt.Sprintf("%.2f", x.PerRow(x.Attempts)) })
		row("leases expired before start", func(x overload.Result) string { return fmt.Sprint(x.LeasesExpired) })
		row("provider calls per row", func(x overload.Result) string { return fmt.Sprintf("%.2f", x.PerRow(x.Calls)) })
		row("rows called more than once (most calls)", func(x overload.Result) string {
			return fmt.Sprintf("%d (%d)", x.RowsCalledTwice, x.MaxCallsPerRow)
		})
		row("completed / dead_letter", func(x overload.Result) string { return fmt.Sprintf("%d / %d", x.Completed, x.DeadLettered) })
		row("time to first success p50 / p95", func(x overload.Result) string {
			return fmt.Sprintf("%s / %s", minutes(x.WaitP50), minutes(x.WaitP95))
		})
		if _, ok := r.Today.Tenants["small"]; ok {
			row("small tenant's wait", func(x overload.Result) string { return minutes(x.Tenants["small"].WaitMax) })
		}
		if _, ok := r.Today.Tenants["broken"]; ok {
			row("calls to the broken connection (most at once)", func(x overload.Result) string {
				return fmt.Sprintf("%d (%d)", x.Tenants["broken"].Calls, x.Tenants["broken"].MaxConcurrent)
			})
			row("healthy rows' delay p95 / max", func(x overload.Result) string {
				var p95, top time.Duration
				for name, t := range x.Tenants {
					if name != "broken" {
						p95, top = max(p95, t.WaitP95), max(top, t.WaitMax)
					}
				}
				return fmt.Sprintf("%s / %s", minutes(p95), minutes(top))
			})
			row("healthy rows undelivered after the hour", func(x overload.Result) string {
				n := 0
				for name, t := range x.Tenants {
					if name != "broken" {
						n += t.Rows - t.Completed
					}
				}
				return fmt.Sprint(n)
			})
		}
		p("\n")
	}
	return b.String()
}

func minutes(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.0f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f min", d.Minutes())
}
