package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/dispatch"
)

const (
	providerDelay = 100 * time.Millisecond // the local webhook receiver's answer time
	batchSize     = 10                     // records per SQS batch
	warmBatches   = 5
)

// workerResult is measurements 2 and 3: batches of 10 records through the
// real push handler against a webhook receiver that answers after 100 ms.
type workerResult struct {
	// Cold is the first batch of a fresh worker (secrets fetched, database
	// and HTTP connections opened); Warm the batches after it.
	Cold time.Duration
	Warm []time.Duration
	// MaxInFlight is the most requests the receiver held at once.
	MaxInFlight int64
	// Statements ran on the database during one warm batch of 10.
	Statements      []statement
	StatementsTotal int64
}

// seqRatio is a batch's wall time over the legacy worker's sequential loop
// (10 × 100 ms): 1.0 is the legacy worker.
func seqRatio(d time.Duration) float64 { return d.Seconds() / (batchSize * providerDelay).Seconds() }

func measureWorker(ctx context.Context, env *benchEnv) (workerResult, error) {
	var res workerResult
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

	var inFlight, maxInFlight, served atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(providerDelay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"receiver-%d"}`, served.Add(1))
	}))
	defer receiver.Close()
	cfg, _ := json.Marshal(map[string]string{"url": receiver.URL})

	tenants, err := createTenants(ctx, env, conn, batchSize, "webhook", string(cfg), "integrations/bench/worker/")
	if err != nil {
		return res, err
	}
	a, err := env.newApp(ctx, url)
	if err != nil {
		return res, err
	}
	defer a.Close()
	q := newQueueSender(batchSize)
	d, err := a.Dispatcher(q)
	if err != nil {
		return res, err
	}
	w, err := a.PushWorker() // the real resolver, cache on, against moto
	if err != nil {
		return res, err
	}

	// next seeds one job per connection and dispatches them: one SQS batch.
	next := func() (events.SQSEvent, error) {
		if err := seedJobs(ctx, conn, tenants, "webhook", batchSize, 3); err != nil {
			return events.SQSEvent{}, err
		}
		s, err := d.Run(ctx, dispatch.Request{Limit: batchSize})
		if err != nil {
			return events.SQSEvent{}, err
		}
		ev, _ := q.take(ctx)
		if s.Dispatched != batchSize || len(ev.Records) != batchSize {
			return ev, fmt.Errorf("dispatched %d, queued %d, want %d", s.Dispatched, len(ev.Records), batchSize)
		}
		return ev, nil
	}
	handle := func(ev events.SQSEvent) (time.Duration, error) {
		return timed(func() error {
			resp, err := w.Handle(ctx, ev)
			if err == nil && len(resp.BatchItemFailures) > 0 {
				err = fmt.Errorf("%d batch item failures", len(resp.BatchItemFailures))
			}
			return err
		})
	}

	for i := range 1 + warmBatches {
		ev, err := next()
		if err != nil {
			return res, err
		}
		took, err := handle(ev)
		if err != nil {
			return res, err
		}
		if i == 0 {
			res.Cold = took
		} else {
			res.Warm = append(res.Warm, took)
		}
	}

	// Statements of one more warm batch: the counters are reset after the
	// dispatch, so only the push handler's statements are counted.
	ev, err := next()
	if err != nil {
		return res, err
	}
	if err := resetStatements(ctx, conn); err != nil {
		return res, err
	}
	if _, err := handle(ev); err != nil {
		return res, err
	}
	if res.Statements, res.StatementsTotal, err = countStatements(ctx, conn); err != nil {
		return res, err
	}
	res.MaxInFlight = maxInFlight.Load()
	done, err := completed(ctx, conn)
	if err != nil {
		return res, err
	}
	if want := (2 + warmBatches) * batchSize; done != want || int(served.Load()) != want {
		return res, fmt.Errorf("%d rows completed and %d requests served, want %d", done, served.Load(), want)
	}
	return res, nil
}
