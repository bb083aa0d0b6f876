package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"integration-outbox/internal/app"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
)

// throughputResult is measurement 5: the same number of jobs through our
// pipeline and through River, on the same PostgreSQL, one after the other.
type throughputResult struct {
	Jobs      int
	Consumers int
	// Ours is the production-like run, stages overlapping; Staged the
	// diagnostic run, every job dispatched before the consumers start.
	Ours, Staged ourRun
	// River is River's benchmark worker (a no-op); RiverPOLoad River with
	// a worker that runs our purchase-order load statement per job, on
	// the same purchase orders as ours.
	River, RiverPOLoad riverResult
}

// Our throughput run's tenants (organizations with one connection each) and
// lines per purchase order; River's po-load run gets the same.
const (
	throughputTenants = 10
	throughputLines   = 3
)

// River harness workers (bench/river -worker).
const (
	riverNoop   = "noop"
	riverPOLoad = "po-load"
)

// riverResult is the River harness's JSON line, and the statement families
// the bench read after it.
type riverResult struct {
	Jobs          int     `json:"jobs"`
	Worker        string  `json:"worker"`
	Seconds       float64 `json:"seconds"`
	JobsPerSecond float64 `json:"jobsPerSecond"`
	MaxWorkers    int     `json:"maxWorkers"`
	PoolMaxConns  int32   `json:"poolMaxConns"`
	RiverVersion  string  `json:"riverVersion"`
	// CPU from client start to the last completion: the harness process
	// and the PostgreSQL cluster.
	CPUSeconds         float64 `json:"cpuSeconds"`
	PostgresCPUSeconds float64 `json:"postgresCpuSeconds"`
	// Families is pg_stat_statements' execution time by statement family,
	// from the clock's start (the harness resets it) to the harness's end.
	Families map[string]familyUse `json:"families,omitempty"`
}

// riverFamilies classify River's statements by the names sqlc gives them
// (pg_stat_statements keeps the leading "-- name:" comment) and the
// purchase-order load as the churn does; the rest (leader election,
// notifications, maintenance) is "other".
var riverFamilies = []statementFamily{
	{"fetch", "-- name: JobGetAvailable "},
	{"complete", "-- name: JobSetStateIfRunningMany "},
}

// throughputFamilies classify measurement 5's statements, ours and River's.
var throughputFamilies = slices.Concat(riverFamilies, churnFamilies)

// throughputFamilyOrder is the order the families are reported in.
var throughputFamilyOrder = []string{"sweep", "claim", "fetch", "start", "purchase order", "record", "record (completed)", "complete", "other"}

func throughputFamily(query string) string { return familyIn(throughputFamilies, query) }

// cpuPer1k is the harness's CPU seconds per 1,000 jobs: its own and the
// cluster's.
func (r riverResult) cpuPer1k() (self, postgres float64) {
	if r.Jobs == 0 {
		return 0, 0
	}
	return r.CPUSeconds * 1000 / float64(r.Jobs), r.PostgresCPUSeconds * 1000 / float64(r.Jobs)
}

func (t throughputResult) oursPerSecond() float64 { return perSecond(t.Jobs, t.Ours.Took) }

func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// throughputRows are measurement 5's rows: ours against River's no-op and
// po-load workers, and our stages.
func throughputRows(tp throughputResult) []tableRow {
	var t []tableRow
	add := func(row tableRow) { t = append(t, row) }
	if tp.Ours.Took == 0 || tp.River.Seconds <= 0 {
		return nil
	}
	ratio := tp.oursPerSecond() / tp.River.JobsPerSecond
	po := tp.RiverPOLoad
	beside := fmt.Sprintf("River %s: %.0f jobs/s (no-op worker, MaxWorkers %d)", tp.River.RiverVersion, tp.River.JobsPerSecond, tp.River.MaxWorkers)
	ratios := "ours/River " + x(ratio)
	if po.Seconds > 0 {
		beside += fmt.Sprintf("; %.0f jobs/s (purchase-order load worker, pool of %d)", po.JobsPerSecond, po.PoolMaxConns)
		ratios = fmt.Sprintf("ours/River no-op %s, ours/River po-load %s", x(ratio), x(tp.oursPerSecond()/po.JobsPerSecond))
	}
	add(tableRow{"5", fmt.Sprintf("Throughput, %s jobs each, same PostgreSQL, one after the other: jobs completed per second", rows(tp.Jobs)),
		fmt.Sprintf("%.0f jobs/s in this run (dispatch + %d push consumers; %d push invocations, %.1f records each)",
			tp.oursPerSecond(), tp.Consumers, tp.Ours.Batches, float64(tp.Jobs)/float64(max(tp.Ours.Batches, 1))),
		beside, ratios, fmt.Sprintf("≥ %.1f× River no-op", targetRiver), status(ratio >= targetRiver)})
	per1k := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(tp.Jobs) }
	ours := tp.Ours.CPU
	oursSelf, oursPG := per1k(ours.Self), per1k(ours.Postgres)
	riverSelf, riverPG := tp.River.cpuPer1k()
	if ours.Postgres > 0 && riverPG > 0 {
		beside := fmt.Sprintf("River no-op %.3f + %.3f = %.3f", riverSelf, riverPG, riverSelf+riverPG)
		ratios := fmt.Sprintf("ours/River no-op: Go %s, PostgreSQL %s, total %s", x(oursSelf/riverSelf), x(oursPG/riverPG),
			x((oursSelf+oursPG)/(riverSelf+riverPG)))
		poSelf, poPG := po.cpuPer1k()
		if poPG > 0 {
			beside += fmt.Sprintf("; River po-load %.3f + %.3f = %.3f", poSelf, poPG, poSelf+poPG)
			ratios += fmt.Sprintf("; ours/River po-load: Go %s, PostgreSQL %s, total %s", x(oursSelf/poSelf), x(oursPG/poPG),
				x((oursSelf+oursPG)/(poSelf+poPG)))
		}
		add(tableRow{"5", "CPU seconds per 1,000 jobs in those runs (the Go process + PostgreSQL)",
			fmt.Sprintf("%.3f + %.3f = %.3f", oursSelf, oursPG, oursSelf+oursPG), beside, ratios, "", ""})
		if poPG > 0 {
			vsPO := oursPG / poPG
			add(tableRow{"5", "PostgreSQL CPU per delivered command (each run's cluster CPU over its jobs)",
				fmt.Sprintf("%.3f ms", oursPG),
				fmt.Sprintf("River po-load %.3f ms; River no-op %.3f ms", poPG, riverPG),
				fmt.Sprintf("ours/River po-load %s; ours/River no-op %s", x(vsPO), x(oursPG/riverPG)),
				fmt.Sprintf("≤ %.1f× River po-load", targetRiverPOLoadPG), status(vsPO <= targetRiverPOLoadPG)})
		}
	}
	if ourShares, poShares := executionShares(tp.Ours.Families, throughputFamilyOrder, tp.Jobs),
		executionShares(po.Families, throughputFamilyOrder, tp.Jobs); ourShares != "" && poShares != "" {
		add(tableRow{"5", "PostgreSQL execution time by statement family in those runs: share (execution ms per 1,000 jobs)",
			ourShares, "River po-load: " + poShares, "", "", ""})
	}
	if st := tp.Staged; st.Dispatch > 0 && st.Push > 0 {
		add(tableRow{"5", "Throughput by stage (diagnostic run: every job dispatched before the consumers start)",
			fmt.Sprintf("dispatch alone %.0f jobs/s; push alone %.0f jobs/s (%d invocations, %.1f records each)",
				perSecond(tp.Jobs, st.Dispatch), perSecond(tp.Jobs, st.Push), st.Batches, float64(tp.Jobs)/float64(max(st.Batches, 1))),
			fmt.Sprintf("River no-op %.0f jobs/s", tp.River.JobsPerSecond),
			fmt.Sprintf("River/stage: dispatch %s, push %s", x(tp.River.JobsPerSecond/perSecond(tp.Jobs, st.Dispatch)), x(tp.River.JobsPerSecond/perSecond(tp.Jobs, st.Push))),
			"", ""})
	}
	return t
}

// measureThroughput runs ours, River's no-op worker, River's po-load worker
// and our staged run, one after the other.
func measureThroughput(ctx context.Context, log *slog.Logger, env *benchEnv, riverBin string, jobs, consumers int) (throughputResult, error) {
	res := throughputResult{Jobs: jobs, Consumers: consumers}
	var err error
	if res.Ours, err = runOurs(ctx, env, jobs, consumers, false, 10); err != nil {
		return res, fmt.Errorf("ours: %w", err)
	}
	log.Info("our throughput measured", "jobs", jobs, "took", res.Ours.Took.Round(time.Millisecond))
	if res.River, err = runRiver(ctx, env, riverBin, riverNoop, jobs); err != nil {
		return res, fmt.Errorf("river, no-op worker: %w", err)
	}
	log.Info("River's throughput measured", "worker", riverNoop, "took", time.Duration(res.River.Seconds*float64(time.Second)).Round(time.Millisecond))
	if res.RiverPOLoad, err = runRiver(ctx, env, riverBin, riverPOLoad, jobs); err != nil {
		return res, fmt.Errorf("river, po-load worker: %w", err)
	}
	log.Info("River's throughput measured", "worker", riverPOLoad, "took", time.Duration(res.RiverPOLoad.Seconds*float64(time.Second)).Round(time.Millisecond))
	if res.Staged, err = runOurs(ctx, env, jobs, consumers, true, 10); err != nil {
		return res, fmt.Errorf("ours, staged: %w", err)
	}
	log.Info("our stages measured", "dispatch", res.Staged.Dispatch.Round(time.Millisecond), "push", res.Staged.Push.Round(time.Millisecond))
	return res, nil
}

// ourRun is one run of our pipeline.
type ourRun struct {
	// Took runs from the first dispatch to the last recorded batch.
	Took time.Duration
	// Batches is how many push invocations the jobs took.
	Batches int64
	// Dispatch and Push are the stages' times when they ran one after the
	// other (staged runs only).
	Dispatch, Push time.Duration
	// CPU is what the run cost this process and PostgreSQL.
	CPU cpuUse
	// Families is pg_stat_statements' execution time by statement family,
	// from the clock's start to the last recorded batch.
	Families map[string]familyUse
}

// runOurs pushes jobs due rows through the real handlers in-process: one
// dispatcher running back to back (each Run claims up to
// DISPATCH_MAX_PER_RUN in batches of 50) feeding the in-process queue, and
// consumers push workers, each with its own App (pool of 4, as one Lambda
// container), taking batches of up to batch (10 as deployed). Sandbox provider, no latency, no
// credential reference (the secret path is measured on its own).
//
// Normally the stages overlap, as in production. A staged run dispatches
// every job before the consumers start, to tell which stage sets the pace.
func runOurs(ctx context.Context, env *benchEnv, jobs, consumers int, staged bool, batch int) (ourRun, error) {
	return runOursWith(ctx, env, jobs, consumers, staged, batch, ourRunOptions{})
}

// ourRunOptions change how runOursWith runs.
type ourRunOptions struct {
	// prepare, when set, runs on the migrated database before the run
	// (the pooler measurement drops the routines with it).
	prepare func(ctx context.Context, url string) error
	// appURL, when set, is the functions' DATABASE_URL for the database's
	// URL (through a pooler); the seeding and the reads connect directly.
	appURL func(url string) string
}

// runOursWith is runOurs with o.
func runOursWith(ctx context.Context, env *benchEnv, jobs, consumers int, staged bool, batch int, o ourRunOptions) (ourRun, error) {
	var res ourRun
	url, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	if o.prepare != nil {
		if err := o.prepare(ctx, url); err != nil {
			return res, err
		}
	}
	appURL := url
	if o.appURL != nil {
		appURL = o.appURL(url)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := seedThroughput(ctx, env, conn, jobs); err != nil {
		return res, err
	}
	for _, stmt := range []string{`analyze`, `checkpoint`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return res, err
		}
	}

	var apps []*app.App
	defer func() {
		for _, a := range apps {
			a.Close()
		}
	}()
	newApp := func() (*app.App, error) {
		a, err := env.newApp(ctx, appURL)
		if err == nil {
			apps = append(apps, a)
		}
		return a, err
	}
	q := newQueueSender(jobs)
	q.batch = batch
	da, err := newApp()
	if err != nil {
		return res, err
	}
	d, err := da.Dispatcher(q)
	if err != nil {
		return res, err
	}
	workers := make([]*push.Worker, consumers)
	for i := range workers {
		a, err := newApp()
		if err != nil {
			return res, err
		}
		if workers[i], err = a.PushWorker(); err != nil {
			return res, err
		}
	}
	// Open the pools' connections before the clock starts, as warm
	// containers would have them.
	for _, a := range apps {
		if err := a.Pool.Ping(ctx); err != nil {
			return res, err
		}
	}

	if err := resetStatements(ctx, conn); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var (
		handled, batches, end atomic.Int64
		cpu0                  = sampleCPU(env.postmaster)
		start                 = time.Now()
		pushStart             time.Time
	)
	dispatchAll := func(ctx context.Context) error {
		defer close(q.msgs)
		for dispatched := 0; dispatched < jobs; {
			s, err := d.Run(ctx, dispatch.Request{})
			if err != nil {
				return err
			}
			if s.Claimed == 0 {
				return fmt.Errorf("dispatch claimed nothing with %d of %d jobs dispatched", dispatched, jobs)
			}
			dispatched += s.Dispatched
		}
		return nil
	}
	consume := func(ctx context.Context, w *push.Worker) error {
		for {
			ev, ok := q.take(ctx)
			if !ok {
				return ctx.Err()
			}
			resp, err := w.Handle(ctx, ev)
			if err != nil {
				return err
			}
			if len(resp.BatchItemFailures) > 0 {
				return fmt.Errorf("%d batch item failures", len(resp.BatchItemFailures))
			}
			batches.Add(1)
			if handled.Add(int64(len(ev.Records))) == int64(jobs) {
				end.Store(int64(time.Since(start)))
			}
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	if staged {
		if err := dispatchAll(ctx); err != nil {
			return res, err
		}
		pushStart = time.Now()
		res.Dispatch = pushStart.Sub(start)
	} else {
		g.Go(func() error { return dispatchAll(gctx) })
	}
	for _, w := range workers {
		g.Go(func() error { return consume(gctx, w) })
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.CPU = sampleCPU(env.postmaster).sub(cpu0)
	res.Took, res.Batches = time.Duration(end.Load()), batches.Load()
	if res.Families, err = readFamilies(ctx, conn, throughputFamily); err != nil {
		return res, err
	}
	if staged {
		res.Push = start.Add(res.Took).Sub(pushStart)
	}
	done, err := completed(ctx, conn)
	if err != nil {
		return res, err
	}
	if done != jobs || res.Took == 0 {
		return res, fmt.Errorf("%d of %d jobs completed", done, jobs)
	}
	return res, nil
}

// seedThroughput creates the throughput run's tenants (sandbox, no
// latency, no credential reference) and jobs queued purchase-order pushes
// of throughputLines lines each.
func seedThroughput(ctx context.Context, env *benchEnv, conn *pgx.Conn, jobs int) error {
	tenants, err := createTenants(ctx, env, conn, throughputTenants, "sandbox", `{"latencyMs": 0}`, "")
	if err != nil {
		return err
	}
	return seedJobs(ctx, conn, tenants, "sandbox", jobs, throughputLines)
}

// runRiver runs the River harness with worker on a fresh database of the
// same cluster: an empty one for the no-op worker; for the po-load worker a
// migrated one seeded as ours is (preparePOLoad).
func runRiver(ctx context.Context, env *benchEnv, bin, worker string, jobs int) (riverResult, error) {
	var res riverResult
	args := []string{"-worker", worker, "-jobs", strconv.Itoa(jobs), "-pg-pid", strconv.Itoa(env.postmaster), "-reset-statements"}
	create := func(ctx context.Context) (string, error) { return env.pg.CreateDatabase(ctx, "") }
	if worker == riverPOLoad {
		create = env.pg.MigratedDatabase
	}
	url, err := create(ctx)
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	if worker == riverPOLoad {
		dir, err := os.MkdirTemp("", "river-po-load-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		files, err := preparePOLoad(ctx, env, url, dir, jobs)
		if err != nil {
			return res, fmt.Errorf("preparing River's database: %w", err)
		}
		args = append(args, "-load-sql", files.statement, "-po-jobs", files.jobs)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `create extension if not exists pg_stat_statements`); err != nil {
		return res, fmt.Errorf("creating pg_stat_statements: %w", err)
	}
	if _, err := conn.Exec(ctx, `checkpoint`); err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("running %s: %w", bin, err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("reading the River harness's output %q: %w", out, err)
	}
	if res.Jobs != jobs || res.Seconds <= 0 || res.Worker != worker {
		return res, errors.New("the River harness reported no run")
	}
	if res.Families, err = readFamilies(ctx, conn, throughputFamily); err != nil {
		return res, err
	}
	return res, nil
}

// poLoadFiles are the po-load harness's inputs.
type poLoadFiles struct {
	// statement holds the load statement's text, jobs one job a line.
	statement, jobs string
}

// poLoadJob is one line of the po-load harness's jobs (bench/river's
// poLoadArgs): what the push worker passes the load statement for a job.
type poLoadJob struct {
	OutboxID       string  `json:"outboxId"`
	OrganizationID string  `json:"organizationId"`
	OrderID        string  `json:"orderId"`
	LocationID     *string `json:"locationId,omitempty"`
	ConnectionID   string  `json:"connectionId"`
	Provider       string  `json:"provider"`
}

// preparePOLoad seeds the migrated database at url as our throughput run's
// (seedThroughput: the same tenants, purchase orders and lines) and writes
// into dir the repository's load statement and the harness's jobs: one per
// seeded outbox row, named as the push worker would pass it to the load
// statement (the connection's location and provider). The outbox rows stay,
// untouched (the load statement does not read them), and the database gets
// the same ANALYZE as ours.
func preparePOLoad(ctx context.Context, env *benchEnv, url, dir string, jobs int) (poLoadFiles, error) {
	files := poLoadFiles{statement: filepath.Join(dir, "load.sql"), jobs: filepath.Join(dir, "jobs.jsonl")}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return files, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := seedThroughput(ctx, env, conn, jobs); err != nil {
		return files, err
	}
	rows, err := conn.Query(ctx, `
		select o.id::text, o.organization_id::text, o.local_entity_id::text, c.location_id::text,
		    o.integration_connection_id::text, c.provider
		from external_integration_outbox o join integration_connections c on c.id = o.integration_connection_id
		order by o.created_at, o.id`)
	if err != nil {
		return files, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[poLoadJob])
	if err != nil {
		return files, fmt.Errorf("reading the seeded jobs: %w", err)
	}
	if len(list) != jobs {
		return files, fmt.Errorf("%d jobs seeded, want %d", len(list), jobs)
	}
	if _, err := conn.Exec(ctx, `analyze`); err != nil {
		return files, err
	}
	if err := os.WriteFile(files.statement, []byte(purchaseorder.LoadStatement()), 0o644); err != nil {
		return files, err
	}
	b, err := poLoadLines(list)
	if err != nil {
		return files, err
	}
	return files, os.WriteFile(files.jobs, b, 0o644)
}

// poLoadLines encodes jobs one JSON object a line.
func poLoadLines(jobs []poLoadJob) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, j := range jobs {
		if err := enc.Encode(j); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}
