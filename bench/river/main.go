// Command river is the River v0.51.2 side of the throughput comparison. It
// lives in its own module so that River's dependencies reach neither the
// Lambdas' go.mod nor the bench module's; the bench program builds and runs
// it as a subprocess on the same PostgreSQL.
//
// It follows River's own benchmark (cmd/river bench, burn-down mode): no-op
// workers, MaxWorkers 2,000, FetchCooldown 2ms, FetchPollInterval 20ms,
// jobs inserted with InsertMany in batches of 5,000 before the client starts,
// the clock running from client start to the last completed-job event. It
// prints one JSON line.
//
//	DATABASE_URL=postgres://... go run . -jobs 20000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
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

// result is the line the bench program reads.
type result struct {
	Jobs          int     `json:"jobs"`
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

func main() {
	jobs := flag.Int("jobs", 20000, "jobs to insert and work")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	pgPID := flag.Int("pg-pid", 0, "the postmaster's pid, to read the cluster's CPU time")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := run(ctx, os.Getenv("DATABASE_URL"), *jobs, *pgPID)
	if err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

func run(ctx context.Context, url string, jobs, pgPID int) (result, error) {
	if url == "" {
		return result{}, errors.New("DATABASE_URL is required")
	}
	pool, err := pgxpool.New(ctx, url)
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
	river.AddWorker(workers, &noopWorker{})
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
		ChanSize: jobs + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()

	params := make([]river.InsertManyParams, 0, insertBatch)
	for i := range jobs {
		params = append(params, river.InsertManyParams{Args: noopArgs{Num: i}})
		if len(params) == insertBatch || i == jobs-1 {
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

	self0, pg0 := selfCPU(), clusterCPU(pgPID)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	var last time.Time
	for done := 0; done < jobs; {
		select {
		case ev := <-events:
			if ev == nil {
				return result{}, errors.New("subscription closed early")
			}
			if ev.Kind != river.EventKindJobCompleted {
				return result{}, fmt.Errorf("job %d: unexpected event %s", ev.Job.ID, ev.Kind)
			}
			last = time.Now()
			done++
		case <-ctx.Done():
			return result{}, fmt.Errorf("%d of %d jobs completed: %w", done, jobs, ctx.Err())
		}
	}
	elapsed := last.Sub(start)
	self1, pg1 := selfCPU(), clusterCPU(pgPID)
	if err := client.Stop(ctx); err != nil {
		return result{}, err
	}
	var completed int
	if err := pool.QueryRow(ctx, `select count(*) from river_job where state = 'completed'`).Scan(&completed); err != nil {
		return result{}, err
	}
	if completed != jobs {
		return result{}, fmt.Errorf("%d jobs completed in river_job, want %d", completed, jobs)
	}
	return result{Jobs: jobs, Seconds: elapsed.Seconds(), JobsPerSecond: float64(jobs) / elapsed.Seconds(),
		MaxWorkers: maxWorkers, PoolMaxConns: pool.Config().MaxConns, RiverVersion: "v0.51.2",
		CPUSeconds: (self1 - self0).Seconds(), PostgresCPUSeconds: (pg1 - pg0).Seconds()}, nil
}
