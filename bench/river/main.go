// Command river is the River v0.51.2 side of the throughput comparison. It
// lives in its own module so that River's dependencies reach neither the
// Lambdas' go.mod nor the bench module's; the bench program builds and runs
// it as a subprocess on the same PostgreSQL.
//
// It follows River's own benchmark (cmd/river bench, burn-down mode):
// MaxWorkers 2,000, FetchCooldown 2ms, FetchPollInterval 20ms, jobs inserted
// with InsertMany in batches of 5,000 before the client starts, the clock
// running from client start to the last completed-job event. It prints one
// JSON line.
//
// Two workers (-worker): "noop", River's own benchmark worker, and
// "po-load", which per job runs the purchase-order load statement of the
// push worker (its text read from -load-sql; the bench program passes the
// repository's) for the order the job names (-po-jobs, one JSON object a
// line, written by the bench program from the purchase orders it seeded in
// this database), and fails the job when no row comes back.
//
//	DATABASE_URL=postgres://... go run . -jobs 20000
//	DATABASE_URL=postgres://... go run . -worker po-load -load-sql load.sql -po-jobs jobs.jsonl -jobs 20000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// Settings of River's own benchmark.
const (
	maxWorkers        = 2_000
	fetchCooldown     = 2 * time.Millisecond
	fetchPollInterval = 20 * time.Millisecond
	insertBatch       = 5_000
)

type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// Worker kinds (-worker).
const (
	workerNoop   = "noop"
	workerPOLoad = "po-load"
)

// result is the line the bench program reads.
type result struct {
	Jobs          int     `json:"jobs"`
	Worker        string  `json:"worker"`
	Seconds       float64 `json:"seconds"`
	JobsPerSecond float64 `json:"jobsPerSecond"`
	MaxWorkers    int     `json:"maxWorkers"`
	PoolMaxConns  int32   `json:"poolMaxConns"`
	RiverVersion  string  `json:"riverVersion"`
	// CPU from client start to the last completion: this process and the
	// PostgreSQL cluster (when -pg-pid names its postmaster).
	CPUSeconds         float64 `json:"cpuSeconds"`
	PostgresCPUSeconds float64 `json:"postgresCpuSeconds"`
}

// config is one run.
type config struct {
	url    string
	jobs   int
	pgPID  int
	worker string
	// loadSQL and poJobs are the po-load worker's statement and jobs.
	loadSQL string
	poJobs  []poLoadArgs
	// resetStatements resets pg_stat_statements when the clock starts, so
	// that what the bench reads afterwards is the run's.
	resetStatements bool
}

func main() {
	var (
		c                config
		loadPath, poPath string
	)
	flag.IntVar(&c.jobs, "jobs", 20000, "jobs to insert and work (po-load: the lines of -po-jobs)")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	flag.IntVar(&c.pgPID, "pg-pid", 0, "the postmaster's pid, to read the cluster's CPU time")
	flag.StringVar(&c.worker, "worker", workerNoop, `"noop" (River's benchmark worker) or "po-load" (the push worker's purchase-order load, per job)`)
	flag.StringVar(&loadPath, "load-sql", "", "po-load: a file holding the load statement")
	flag.StringVar(&poPath, "po-jobs", "", "po-load: a file of the jobs' purchase orders, one JSON object a line")
	flag.BoolVar(&c.resetStatements, "reset-statements", false, "reset pg_stat_statements when the clock starts")
	flag.Parse()
	c.url = os.Getenv("DATABASE_URL")
	if err := c.load(loadPath, poPath); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

// load checks the flags and reads the po-load worker's files.
func (c *config) load(loadPath, poPath string) error {
	switch c.worker {
	case workerNoop:
		return nil
	case workerPOLoad:
	default:
		return fmt.Errorf("-worker %q: %q or %q", c.worker, workerNoop, workerPOLoad)
	}
	if loadPath == "" || poPath == "" {
		return errors.New("-worker po-load needs -load-sql and -po-jobs")
	}
	b, err := os.ReadFile(loadPath)
	if err != nil {
		return fmt.Errorf("reading the load statement: %w", err)
	}
	if c.loadSQL = strings.TrimSpace(string(b)); c.loadSQL == "" {
		return fmt.Errorf("%s holds no statement", loadPath)
	}
	if c.poJobs, err = readPOJobs(poPath); err != nil {
		return err
	}
	if len(c.poJobs) != c.jobs {
		return fmt.Errorf("%s holds %d jobs, -jobs is %d", poPath, len(c.poJobs), c.jobs)
	}
	return nil
}

// args is job i's arguments.
func (c config) args(i int) river.JobArgs {
	if c.worker == workerPOLoad {
		return c.poJobs[i]
	}
	return noopArgs{Num: i}
}

func run(ctx context.Context, c config) (result, error) {
	if c.url == "" {
		return result{}, errors.New("DATABASE_URL is required")
	}
	pool, err := pgxpool.New(ctx, c.url)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return result{}, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return result{}, fmt.Errorf("migrating River's schema: %w", err)
	}

	workers := river.NewWorkers()
	if c.worker == workerPOLoad {
		river.AddWorker(workers, &poLoadWorker{db: pool, sql: c.loadSQL})
	} else {
		river.AddWorker(workers, &noopWorker{})
	}
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: fetchPollInterval,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return result{}, err
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: c.jobs + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()

	params := make([]river.InsertManyParams, 0, insertBatch)
	for i := range c.jobs {
		params = append(params, river.InsertManyParams{Args: c.args(i)})
		if len(params) == insertBatch || i == c.jobs-1 {
			if _, err := client.InsertMany(ctx, params); err != nil {
				return result{}, fmt.Errorf("inserting jobs: %w", err)
			}
			params = params[:0]
		}
	}
	// Fresh statistics, as the outbox side gets after its load.
	if _, err := pool.Exec(ctx, `analyze river_job`); err != nil {
		return result{}, err
	}
	if c.resetStatements {
		if _, err := pool.Exec(ctx, `select pg_stat_statements_reset()`); err != nil {
			return result{}, fmt.Errorf("resetting pg_stat_statements: %w", err)
		}
	}

	self0, pg0 := selfCPU(), clusterCPU(c.pgPID)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	var last time.Time
	for done := 0; done < c.jobs; {
		select {
		case ev := <-events:
			if ev == nil {
				return result{}, errors.New("subscription closed early")
			}
			if ev.Kind != river.EventKindJobCompleted {
				return result{}, fmt.Errorf("job %d: unexpected event %s: %s", ev.Job.ID, ev.Kind, lastError(ev.Job.Errors))
			}
			last = time.Now()
			done++
		case <-ctx.Done():
			return result{}, fmt.Errorf("%d of %d jobs completed: %w", done, c.jobs, ctx.Err())
		}
	}
	elapsed := last.Sub(start)
	self1, pg1 := selfCPU(), clusterCPU(c.pgPID)
	if err := client.Stop(ctx); err != nil {
		return result{}, err
	}
	var completed int
	if err := pool.QueryRow(ctx, `select count(*) from river_job where state = 'completed'`).Scan(&completed); err != nil {
		return result{}, err
	}
	if completed != c.jobs {
		return result{}, fmt.Errorf("%d jobs completed in river_job, want %d", completed, c.jobs)
	}
	return result{Jobs: c.jobs, Worker: c.worker, Seconds: elapsed.Seconds(), JobsPerSecond: float64(c.jobs) / elapsed.Seconds(),
		MaxWorkers: maxWorkers, PoolMaxConns: pool.Config().MaxConns, RiverVersion: "v0.51.2",
		CPUSeconds: (self1 - self0).Seconds(), PostgresCPUSeconds: (pg1 - pg0).Seconds()}, nil
}

// lastError is the last error River recorded for a job, or "".
func lastError(errs []rivertype.AttemptError) string {
	if len(errs) == 0 {
		return ""
	}
	return errs[len(errs)-1].Error
}
