package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"integration-outbox/internal/app"
	"integration-outbox/internal/dispatch"
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
	River        riverResult
}

// riverResult is the River harness's JSON line.
type riverResult struct {
	Jobs          int     `json:"jobs"`
	Seconds       float64 `json:"seconds"`
	JobsPerSecond float64 `json:"jobsPerSecond"`
	MaxWorkers    int     `json:"maxWorkers"`
	PoolMaxConns  int32   `json:"poolMaxConns"`
	RiverVersion  string  `json:"riverVersion"`
	// CPU from client start to the last completion: the harness process
	// and the PostgreSQL cluster.
	CPUSeconds         float64 `json:"cpuSeconds"`
	PostgresCPUSeconds float64 `json:"postgresCpuSeconds"`
}

func (t throughputResult) oursPerSecond() float64 { return perSecond(t.Jobs, t.Ours.Took) }

func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func measureThroughput(ctx context.Context, log *slog.Logger, env *benchEnv, riverBin string, jobs, consumers int) (throughputResult, error) {
	res := throughputResult{Jobs: jobs, Consumers: consumers}
	var err error
	if res.Ours, err = runOurs(ctx, env, jobs, consumers, false, 10); err != nil {
		return res, fmt.Errorf("ours: %w", err)
	}
	log.Info("our throughput measured", "jobs", jobs, "took", res.Ours.Took.Round(time.Millisecond))
	if res.River, err = runRiver(ctx, env, riverBin, jobs); err != nil {
		return res, fmt.Errorf("river: %w", err)
	}
	log.Info("River's throughput measured", "jobs", jobs, "took", time.Duration(res.River.Seconds*float64(time.Second)).Round(time.Millisecond))
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
	var res ourRun
	url, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tenants, err := createTenants(ctx, env, conn, 10, "sandbox", `{"latencyMs": 0}`, "")
	if err != nil {
		return res, err
	}
	if err := seedJobs(ctx, conn, tenants, "sandbox", jobs, 3); err != nil {
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
		a, err := env.newApp(ctx, url)
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

// runRiver runs the River harness on a fresh database of the same cluster.
func runRiver(ctx context.Context, env *benchEnv, bin string, jobs int) (riverResult, error) {
	var res riverResult
	url, err := env.pg.CreateDatabase(ctx, "")
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	if err := env.admin(ctx, func(c *pgx.Conn) error { _, err := c.Exec(ctx, `checkpoint`); return err }); err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, bin, "-jobs", strconv.Itoa(jobs), "-pg-pid", strconv.Itoa(env.postmaster))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("running %s: %w", bin, err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("reading the River harness's output %q: %w", out, err)
	}
	if res.Jobs != jobs || res.Seconds <= 0 {
		return res, errors.New("the River harness reported no run")
	}
	return res, nil
}
