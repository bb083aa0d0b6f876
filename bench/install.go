package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/migrate"
	"integration-outbox/migrations"
)

// installRun is one install onto a host outbox of Rows rows under insert
// load: the host's inserts while migrate.Up runs, beside the same load for
// the same length of time with no migration.
type installRun struct {
	Rows int
	// Load is the time the set-based load of the rows took (insert ...
	// select generate_series, then vacuum analyze).
	Load time.Duration
	// Migrate is how long migrate.Up took.
	Migrate   time.Duration
	Rate      int
	During    []time.Duration // each host insert's time while migrate.Up ran
	Baseline  []time.Duration // the same load, no migration
	Leftovers int             // rows the old worker left in processing
	Recovered int             // of which migrate.Up leased
}

// measureInstall loads a host outbox of each size (the host's schema as the
// back office has it: the stand-in tables, no objects of ours), runs the
// host's insert load alone for window, then runs it again while migrate.Up
// installs everything.
func measureInstall(ctx context.Context, log *slog.Logger, env *benchEnv, sizes []int, rate int, window time.Duration) ([]installRun, error) {
	var out []installRun
	for _, n := range sizes {
		run, err := measureInstallOnce(ctx, log, env, n, rate, window)
		if err != nil {
			return out, fmt.Errorf("%s rows: %w", rows(n), err)
		}
		out = append(out, run)
	}
	return out, nil
}

func measureInstallOnce(ctx context.Context, log *slog.Logger, env *benchEnv, n, rate int, window time.Duration) (installRun, error) {
	res := installRun{Rows: n, Rate: rate}
	url, err := env.pg.CreateDatabase(ctx, "")
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	log.Info("loading the host outbox", "rows", n)
	began := time.Now()
	// One row in a thousand is a leftover of the old worker: processing,
	// no lease, no provider status. Most rows are completed.
	if _, err := conn.Exec(ctx, migrations.HostStandIn+fmt.Sprintf(`;
		set synchronous_commit = off;
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, created_at)
		select ('00000000-0000-4000-8000-' || lpad((g %% 1000)::text, 12, '0'))::uuid, gen_random_uuid(), 'webhook',
			'push_purchase_order', 'purchase_order', gen_random_uuid(), '{"externalSupplierId": "SUP-1"}', 'key-' || g,
			case when g %% 1000 = 0 then 'processing' when g %% 50 = 0 then 'failed' when g %% 20 = 0 then 'queued'
			     else 'completed' end,
			g %% 3, now() - make_interval(secs => %d - g)
		from generate_series(1, %d) g`, n, n)); err != nil {
		return res, fmt.Errorf("loading: %w", err)
	}
	if _, err := conn.Exec(ctx, `vacuum (analyze) external_integration_outbox`); err != nil {
		return res, fmt.Errorf("vacuuming: %w", err)
	}
	res.Load = time.Since(began)
	if err := conn.QueryRow(ctx, `select count(*) from external_integration_outbox where status = 'processing'`).Scan(&res.Leftovers); err != nil {
		return res, err
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	log.Info("host inserts alone", "rows", n, "rate", rate, "window", window)
	stop := startHostLoad(ctx, pool, rate)
	time.Sleep(window)
	res.Baseline = stop()

	log.Info("host inserts while migrate.Up installs", "rows", n)
	stop = startHostLoad(ctx, pool, rate)
	began = time.Now()
	err = migrate.UpWith(ctx, url, migrate.Config{Log: log})
	res.Migrate = time.Since(began)
	res.During = stop()
	if err != nil {
		return res, fmt.Errorf("migrate up: %w", err)
	}
	if err := conn.QueryRow(ctx, `select count(*) from external_integration_outbox
		where status = 'processing' and lease_expires_at is not null`).Scan(&res.Recovered); err != nil {
		return res, err
	}
	if res.Recovered != res.Leftovers {
		return res, fmt.Errorf("migrate up leased %d of the %d leftovers", res.Recovered, res.Leftovers)
	}
	return res, nil
}

// startHostLoad inserts rate rows a second into the host outbox, each from
// its own goroutine (as independent back-office requests), and returns each
// insert's time when stopped.
func startHostLoad(ctx context.Context, pool *pgxpool.Pool, rate int) (stop func() []time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu    sync.Mutex
		times []time.Duration
		wg    sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				began := time.Now()
				_, err := pool.Exec(context.WithoutCancel(ctx), `insert into external_integration_outbox (organization_id,
					integration_connection_id, provider, command_type, local_entity_type, local_entity_id, payload_json,
					idempotency_key)
					values (gen_random_uuid(), gen_random_uuid(), 'webhook', 'push_purchase_order', 'purchase_order',
						gen_random_uuid(), '{"externalSupplierId": "SUP-1"}', 'live-' || gen_random_uuid())`)
				took := time.Since(began)
				if err == nil {
					mu.Lock()
					times = append(times, took)
					mu.Unlock()
				}
			}()
		}
	}()
	return func() []time.Duration {
		cancel()
		<-done
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(times)
	}
}

func longest(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// targetInstallWait is the longest a host insert may wait during the install.
const targetInstallWait = time.Second

func installRows(runs []installRun) []tableRow {
	var t []tableRow
	for _, r := range runs {
		during, alone := longest(r.During), longest(r.Baseline)
		t = append(t, tableRow{"8", fmt.Sprintf("Install (`migrate.Up`) onto a %s-row host outbox under %d host inserts/s: longest host insert", rows(r.Rows), r.Rate),
			fmt.Sprintf("%s during the install (p99 %s, %d inserts; the install took %s and leased %d leftovers)",
				ms(during), ms(percentile(r.During, 0.99)), len(r.During), r.Migrate.Round(time.Millisecond), r.Recovered),
			fmt.Sprintf("%s with no migration (p99 %s, %d inserts)", ms(alone), ms(percentile(r.Baseline, 0.99)), len(r.Baseline)),
			x(float64(during) / float64(max(alone, 1))),
			"< 1 s", status(during < targetInstallWait)})
	}
	return t
}

func installMarkdown(runs []installRun) string {
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("8. **Install on a live host database.** A fresh database gets the host's tables as the back office has them (`migrations/standin/host_schema.sql`, no objects of ours) and its outbox is bulk-loaded with one set-based statement (`insert ... select generate_series`, `synchronous_commit` off, then `VACUUM (ANALYZE)`): most rows `completed`, 1 in 20 `queued`, 1 in 50 `failed`, 1 in 1,000 `processing` with no lease (the old worker's leftovers). Load times: ")
	for i, r := range runs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s rows %s", rows(r.Rows), r.Load.Round(time.Second))
	}
	b.WriteString(". The host's load is one insert per tick of a ticker (each from its own goroutine on a pool, as independent back-office requests), first alone for a fixed window, then while `migrate.Up` installs every migration (indexes built concurrently, constraints `NOT VALID` then validated, each `ALTER` under a 200 ms `lock_timeout` retried with backoff, the leftovers leased in batches); each insert's time from send to answer is kept.\n")
	return b.String()
}
