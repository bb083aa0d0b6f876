package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/testenv"
)

// The pooler measurement (-only pooler): our claim and our pipeline
// directly and through PgBouncer in transaction mode, beside the build
// before routines (named prepared statements, direct only).
const (
	poolerRows = 100_000
	// poolerDueEvery: one row in poolerDueEvery is due (20k of 100k).
	poolerDueEvery = 5
	// poolerServers is PgBouncer's default_pool_size in the throughput
	// runs: fewer server connections than the run's clients.
	poolerServers = 8
)

// Pooler variants: how the functions reach the database and which
// statements they send.
const (
	poolerBefore       = "direct, named statements, no routines (the build before)"
	poolerDirect       = "direct, unnamed statements and routines (default)"
	poolerDirectNamed  = "direct, named statements and routines (default_query_exec_mode=cache_statement)"
	poolerBouncer      = "PgBouncer (transaction mode), unnamed statements and routines (default)"
	poolerBouncerPlain = "PgBouncer (transaction mode), unnamed statements, no routines"
)

var poolerClaimVariants = []string{poolerBefore, poolerDirect, poolerBouncer, poolerBouncerPlain}

// poolerThroughputVariants are the throughput runs, in order.
var poolerThroughputVariants = []string{poolerBefore, poolerDirect, poolerDirectNamed, poolerBouncer}

// poolerResult is the -only pooler measurement.
type poolerResult struct {
	Rows, Due int
	// Claim holds the measured durations of the claim statement per
	// variant.
	Claim map[string][]time.Duration
	// Throughput is our pipeline per variant (poolerBefore, poolerDirect,
	// poolerBouncer).
	Throughput map[string]ourRun
	Jobs       int
	Consumers  int
}

// claimTimer records how long the scheduled claim's statement (plain or
// its routine's call) took on a connection, from its send to its rows read
// (pgx's query trace).
type claimTimer struct {
	plain, call string
	mu          sync.Mutex
	started     time.Time
	took        time.Duration
}

// claimTraced marks a traced query's context as the claim's.
type claimTraced struct{}

func newClaimTimer() *claimTimer {
	for _, r := range outbox.Routines() {
		if r.Name == "outbox/claim_scheduled" {
			return &claimTimer{plain: r.SQL, call: r.Call()}
		}
	}
	panic("bench: outbox has no scheduled claim among its routines")
}

func (c *claimTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL != c.plain && data.SQL != c.call {
		return ctx
	}
	c.mu.Lock()
	c.started = time.Now()
	c.mu.Unlock()
	return context.WithValue(ctx, claimTraced{}, true)
}

func (c *claimTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(claimTraced{}) == true {
		c.mu.Lock()
		c.took = time.Since(c.started)
		c.mu.Unlock()
	}
}

// measurePooler loads one outbox of poolerRows rows (one in poolerDueEvery
// due), clones it without our routines, and measures the claim of 50 in
// each variant, the variants taking turns, then our pipeline directly and
// through PgBouncer.
func measurePooler(ctx context.Context, log *slog.Logger, env *benchEnv, runs, jobs, consumers int) (poolerResult, error) {
	res := poolerResult{Rows: poolerRows, Claim: map[string][]time.Duration{}, Throughput: map[string]ourRun{},
		Jobs: jobs, Consumers: consumers}
	bouncer, err := testenv.StartPgBouncer(env.pg, testenv.PgBouncerOptions{DefaultPoolSize: poolerServers, MaxClientConn: 400})
	if err != nil {
		return res, err
	}
	defer bouncer.Stop()
	via := func(url string) string { return bouncer.URLFor(databaseName(url)) }

	ours, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), ours)
	if err := loadPoolerOutbox(ctx, ours, &res.Due); err != nil {
		return res, err
	}
	plainName := databaseName(ours) + "_plain"
	if err := cloneDatabase(ctx, env, databaseName(ours), plainName); err != nil {
		return res, err
	}
	plain := testenv.ReplaceDatabase(ours, plainName)
	defer env.dropDatabase(context.WithoutCancel(ctx), plain)
	if err := dropRoutines(ctx, plain); err != nil {
		return res, err
	}
	urls := map[string]string{
		poolerBefore:       plain + "&default_query_exec_mode=cache_statement",
		poolerDirect:       ours,
		poolerBouncer:      via(ours),
		poolerBouncerPlain: via(plain),
	}
	type claimer struct {
		pool  *pgxpool.Pool
		timer *claimTimer
	}
	claimers := map[string]claimer{}
	for _, v := range poolerClaimVariants {
		timer := newClaimTimer()
		cfg, err := pgxpool.ParseConfig(urls[v])
		if err != nil {
			return res, err
		}
		pgtx.Configure(cfg.ConnConfig)
		cfg.MaxConns = 1
		cfg.ConnConfig.Tracer = timer
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return res, err
		}
		defer pool.Close()
		claimers[v] = claimer{pool, timer}
	}
	log.Info("pooler: claims", "rows", poolerRows, "due", res.Due, "runs", runs)
	for round := range claimWarmup + runs {
		for _, v := range poolerClaimVariants {
			c := claimers[v]
			if err := poolerClaimOnce(ctx, c.pool); err != nil {
				return res, fmt.Errorf("%s: %w", v, err)
			}
			if round >= claimWarmup {
				res.Claim[v] = append(res.Claim[v], c.timer.took)
			}
		}
	}
	for _, v := range poolerClaimVariants {
		c := claimers[v]
		c.pool.Close()
	}

	for _, v := range poolerThroughputVariants {
		var prepare func(context.Context, string) error
		appURL := func(url string) string { return url }
		switch v {
		case poolerBefore:
			prepare = dropRoutines
			appURL = func(url string) string { return url + "&default_query_exec_mode=cache_statement" }
		case poolerDirectNamed:
			appURL = func(url string) string { return url + "&default_query_exec_mode=cache_statement" }
		case poolerBouncer:
			appURL = via
		}
		log.Info("pooler: throughput", "variant", v, "jobs", jobs)
		run, err := runOursWith(ctx, env, jobs, consumers, false, 10, ourRunOptions{prepare: prepare, appURL: appURL})
		if err != nil {
			return res, fmt.Errorf("throughput, %s: %w", v, err)
		}
		res.Throughput[v] = run
	}
	return res, nil
}

// poolerClaimOnce claims 50 rows through a store on pool, as the dispatch
// function does, in a transaction rolled back (so every claim meets the
// same rows; the store's claim runs in a savepoint of it).
func poolerClaimOnce(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	claims, err := outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute}).Claim(ctx,
		outbox.ClaimParams{Limit: claimLimit, MaxAttempts: 10, Lease: 900 * time.Second})
	if err != nil {
		return err
	}
	if len(claims) != claimLimit {
		return fmt.Errorf("claimed %d rows, want %d", len(claims), claimLimit)
	}
	return nil
}

// loadPoolerOutbox loads poolerRows rows as measurement 1 does, then makes
// one in poolerDueEvery of them due (queued), and vacuums.
func loadPoolerOutbox(ctx context.Context, url string, due *int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := loadOutbox(ctx, conn, poolerRows); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `update external_integration_outbox set status = 'queued', attempt_count = 0,
		completed_at = null, provider_reference = null, provider_status = null
		where status = 'completed' and abs(hashtext(id::text)) % $1 = 0`, poolerDueEvery); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `vacuum (analyze) external_integration_outbox`); err != nil {
		return err
	}
	return conn.QueryRow(ctx, `select count(*) from external_integration_outbox where status in ('queued', 'failed')`).Scan(due)
}

// dropRoutines drops our routines from the database at url: the build
// before them.
func dropRoutines(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sqlroutine.DropAllSQL)
	return err
}

// poolerTableRows are the -only pooler rows, against their goals: the
// claim through PgBouncer ≤ 1.2× the build before's direct claim, the
// throughput's jobs/s ≥ 0.9× and its PostgreSQL CPU per command ≤ 1.1× direct.
func poolerTableRows(p *poolerResult) []tableRow {
	if p == nil || len(p.Claim[poolerBefore]) == 0 {
		return nil
	}
	var t []tableRow
	before := median(p.Claim[poolerBefore])
	for _, v := range poolerClaimVariants[1:] {
		m := median(p.Claim[v])
		r := float64(m) / float64(before)
		row := tableRow{"P", fmt.Sprintf("Claim of 50, %s rows, %s due, the claim statement sent to its rows read: %s; median of %d", rows(p.Rows), rows(p.Due), v, len(p.Claim[v])),
			ms(m), "the build before, direct: " + ms(before), x(r), "", ""}
		switch v {
		case poolerBouncer:
			row.target, row.status = "≤ 1.20×", status(r <= 1.2)
		case poolerDirect:
			row.target, row.status = "≤ 1.00× (a direct connection no slower)", status(r <= 1.0)
		}
		t = append(t, row)
	}
	direct, ok := p.Throughput[poolerDirect]
	if !ok || direct.Took == 0 {
		return t
	}
	cpuPer := func(r ourRun) float64 { return r.CPU.Postgres.Seconds() * 1000 / float64(p.Jobs) }
	for _, v := range []string{poolerBefore, poolerDirectNamed, poolerBouncer} {
		r, ok := p.Throughput[v]
		if !ok || r.Took == 0 {
			continue
		}
		jobsRatio := perSecond(p.Jobs, r.Took) / perSecond(p.Jobs, direct.Took)
		cpuRatio := cpuPer(r) / cpuPer(direct)
		row := tableRow{"P", fmt.Sprintf("Throughput, %s jobs, dispatch + %d push consumers: %s against direct with routines", rows(p.Jobs), p.Consumers, v),
			fmt.Sprintf("%.0f jobs/s, PostgreSQL CPU %.3f ms per command", perSecond(p.Jobs, r.Took), cpuPer(r)),
			fmt.Sprintf("direct, routines: %.0f jobs/s, %.3f ms per command", perSecond(p.Jobs, direct.Took), cpuPer(direct)),
			fmt.Sprintf("jobs/s %s, CPU %s", x(jobsRatio), x(cpuRatio)), "", ""}
		switch v {
		case poolerBouncer:
			row.target, row.status = "jobs/s ≥ 0.90×, CPU ≤ 1.10×", status(jobsRatio >= 0.9 && cpuRatio <= 1.1)
		case poolerBefore:
			row.measure = fmt.Sprintf("Throughput, %s jobs, dispatch + %d push consumers: the build before (direct, named statements, no routines) against direct with routines", rows(p.Jobs), p.Consumers)
		}
		t = append(t, row)
	}
	return t
}

// poolerMarkdown is how the pooler figures were taken.
func poolerMarkdown(p *poolerResult) string {
	if p == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n**P. Behind a transaction pooler.** PgBouncer 1.18 (Debian's package) in `pool_mode = transaction` with its shipped settings otherwise, started by the bench as the `postgres` user on loopback (`internal/testenv`). Claim: one migrated database of %s rows loaded as in measurement 1, then one completed row in %d made `queued` again (%s due), vacuumed; a clone with our routines dropped is the build before them. Each variant is a pool of one connection configured as the functions' (`pgtx.Configure`: unnamed statements; the build before adds `default_query_exec_mode=cache_statement` to its URL, named prepared statements as pgx sends by default), and claims 50 through `outbox.Store.Claim` in a transaction rolled back; the time is pgx's trace of the scheduled claim's statement (the plain statement or its routine's call) from its send to its rows read, on loopback. The variants take turns, %d unmeasured rounds first. Throughput: measurement 5's run of our pipeline (%s jobs, %d push consumers each with its own pool, sandbox provider, batches of 10), once on a database whose routines were dropped with named statements (the build before), once direct, once direct with named statements (`default_query_exec_mode=cache_statement`) and the routines, once with every function's `DATABASE_URL` through PgBouncer (`default_pool_size` %d, fewer server connections than the run's clients); PostgreSQL CPU is the cluster's processes' (not PgBouncer's).\n",
		rows(p.Rows), poolerDueEvery, rows(p.Due), claimWarmup, rows(p.Jobs), p.Consumers, poolerServers)
	fmt.Fprintf(&b, "\n   The throughput runs' server execution time per command by statement family (`pg_stat_statements`, top-level statements: a routine's call counts under its statement's family):\n\n")
	for _, v := range poolerThroughputVariants {
		r, ok := p.Throughput[v]
		if !ok || p.Jobs == 0 {
			continue
		}
		var parts []string
		for _, f := range throughputFamilyOrder {
			if u, ok := r.Families[f]; ok {
				parts = append(parts, fmt.Sprintf("%s %.3f ms", f, u.ExecMs/float64(p.Jobs)))
			}
		}
		fmt.Fprintf(&b, "   - %s: %s\n", v, strings.Join(parts, ", "))
	}
	return b.String()
}
