package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// batchLeverSizes are the push batch sizes the lever compares: 10, the
// template's default PushBatchSize, and 100, which the SQS event source
// allows with a batching window (PushMaximumBatchingWindowInSeconds ≥ 1).
var batchLeverSizes = []int{10, 100}

// batchLeverRun is our throughput run at one push batch size.
type batchLeverRun struct {
	Batch, Jobs int
	Run         ourRun
}

// measureBatchLever runs our pipeline (as measurement 5's staged run,
// without River) once per push batch size, one after the other on fresh
// databases: every job is dispatched before the consumers start, so each
// invocation gets a full batch, as a batching window gives it under load.
func measureBatchLever(ctx context.Context, log *slog.Logger, env *benchEnv, jobs, consumers int) ([]batchLeverRun, error) {
	var out []batchLeverRun
	for _, b := range batchLeverSizes {
		r, err := runOurs(ctx, env, jobs, consumers, true, b)
		if err != nil {
			return out, fmt.Errorf("push batches of %d: %w", b, err)
		}
		log.Info("push batch lever measured", "batch", b, "took", r.Took.Round(time.Millisecond))
		out = append(out, batchLeverRun{Batch: b, Jobs: jobs, Run: r})
	}
	return out, nil
}

func (r batchLeverRun) per1k(d time.Duration) float64 { return d.Seconds() * 1000 / float64(r.Jobs) }

// batchLeverRows compares each larger batch with the first (the default).
func batchLeverRows(runs []batchLeverRun) []tableRow {
	if len(runs) < 2 {
		return nil
	}
	base := runs[0]
	var t []tableRow
	for _, r := range runs[1:] {
		t = append(t, tableRow{"5", fmt.Sprintf("Lever: push batches of %d (%s jobs, %d push invocations) against %d (%d invocations), every job dispatched first: push stage jobs per second; CPU seconds per 1,000 jobs (dispatch and push), the Go process + PostgreSQL",
			r.Batch, rows(r.Jobs), r.Run.Batches, base.Batch, base.Run.Batches),
			fmt.Sprintf("%.0f jobs/s; %.3f + %.3f", perSecond(r.Jobs, r.Run.Push), r.per1k(r.Run.CPU.Self), r.per1k(r.Run.CPU.Postgres)),
			fmt.Sprintf("batches of %d: %.0f jobs/s; %.3f + %.3f", base.Batch, perSecond(base.Jobs, base.Run.Push), base.per1k(base.Run.CPU.Self), base.per1k(base.Run.CPU.Postgres)),
			fmt.Sprintf("rate %s; PostgreSQL CPU %s", x(perSecond(r.Jobs, r.Run.Push)/perSecond(base.Jobs, base.Run.Push)),
				x(r.per1k(r.Run.CPU.Postgres)/max(base.per1k(base.Run.CPU.Postgres), 1e-9))),
			"", "lever"})
	}
	return t
}

func batchLeverMarkdown(runs []batchLeverRun) string {
	if len(runs) == 0 {
		return ""
	}
	var sizes []string
	for _, r := range runs {
		sizes = append(sizes, fmt.Sprint(r.Batch))
	}
	return fmt.Sprintf("\n## Lever: larger push batches\n\nOur pipeline as in measurement 5's staged run (no River: every job dispatched into the in-process queue first, then the consumers drain it, so each invocation takes a full batch, as a batching window gives it under load), run once per push batch size (%s messages at most per push invocation), one after the other on fresh databases. The rate is the push stage's; the CPU covers both stages. In a deployment the batch size is the template's `PushBatchSize`; above 10 the SQS event source needs `PushMaximumBatchingWindowInSeconds` of at least 1, which adds up to that many seconds before a batch starts.\n",
		strings.Join(sizes, " and "))
}
