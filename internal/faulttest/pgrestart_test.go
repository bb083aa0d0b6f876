package faulttest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/message"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/testenv"
)

// gate holds provider calls while closed: each call reports its arrival
// and waits for the gate to open.
type gate struct {
	provider.PurchaseOrderPusher
	closed  atomic.Bool
	arrived chan struct{}
	open    chan struct{}
}

func (g *gate) PushPurchaseOrder(ctx context.Context, conn provider.Connection, cred credential.Credential, cmd provider.PurchaseOrderPush) (provider.Result, error) {
	if g.closed.Load() {
		g.arrived <- struct{}{}
		<-g.open
	}
	return g.PurchaseOrderPusher.PushPurchaseOrder(ctx, conn, cred, cmd)
}

// sendFailsOnce forwards SendMessageBatch calls; the n-th runs fault and
// fails.
type sendFailsOnce struct {
	next  dispatch.Sender
	n     int64
	calls atomic.Int64
	fault func()
}

func (s *sendFailsOnce) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if s.calls.Add(1) == s.n {
		s.fault()
		return nil, errors.New("injected: SendMessageBatch failed")
	}
	return s.next.SendMessageBatch(ctx, in, o...)
}

// TestPostgresRestartMidBatch stops PostgreSQL the hard way (pg_ctl stop -m
// immediate) twice: in the middle of a dispatch run, between a send that
// failed and the release of its rows, and in the middle of a push batch,
// after the provider answered and before the results were recorded. The
// dispatcher returns an error, the workers report every record as a batch
// item failure, and once the server is back every row completes — the
// unrecorded ones through their lease, with the same idempotency key.
func TestPostgresRestartMidBatch(t *testing.T) {
	t.Parallel()
	// A cluster of its own: the other tests keep theirs while this one
	// goes down.
	pg2 := testenv.OwnPostgres(t)
	f := pg2.NewDB(t)
	// The pipeline commits synchronously, as production does (the test
	// cluster runs with synchronous_commit=off for speed): what the server
	// acknowledged survives the crash.
	pool := testenv.OpenPool(t, f.URL, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
		cfg.MaxConns = 10
	})
	e := newEnvOn(t, f, pool)
	restart := func() {
		t.Helper()
		if err := pg2.Start(); err != nil {
			t.Fatal(err)
		}
		// Connections to the old server are gone; a Lambda container would
		// lose one invocation to each. Drop them so each phase's outcome
		// is exact.
		pool.Reset()
		f.Pool.Reset()
	}
	stop := func() {
		t.Helper()
		if err := pg2.StopImmediate(); err != nil {
			t.Fatal(err)
		}
	}

	g := &gate{PurchaseOrderPusher: e.sandbox, arrived: make(chan struct{}), open: make(chan struct{})}
	worker := e.worker(t, workerOpts{providers: provider.Registry{provider.NameSandbox: g}})
	var ids []string
	for i := range 3 {
		org := f.NewID(t)
		conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
		for j := range 10 {
			ids = append(ids, f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: f.PurchaseOrder(t, org, "", 1),
				CreatedAt: time.Now().Add(time.Duration(10*i+j-100) * time.Second)}))
		}
	}

	// 1. A dispatch run: two batches sent, then the database dies while the
	// third is being sent, so its rows cannot be released.
	// The lease outlasts the restarts below (a claim whose lease expired is
	// not started), and the unsent rows come back once it expires.
	d := e.dispatcher(t, &sendFailsOnce{next: e.q, n: 3, fault: stop}, 20*time.Second, 10)
	s, err := d.Run(context.Background(), dispatch.Request{})
	if err == nil || s != (dispatch.Summary{Claimed: 30, Dispatched: 20}) {
		t.Fatalf("dispatch run through the crash: %+v, %v; want an error and {30 20 0 0}", s, err)
	}
	t.Logf("dispatcher error: %v", err)

	// While it is down: the dispatcher errors, the worker fails every record
	// without calling the provider.
	if s, err := e.dispatcher(t, nil, time.Minute, 10).Run(context.Background(), dispatch.Request{}); err == nil || s != (dispatch.Summary{}) {
		t.Errorf("dispatch with the database down: %+v, %v", s, err)
	}
	down := e.q.receive(10)
	if resp := e.handle(t, worker, down); len(resp.BatchItemFailures) != len(down) {
		t.Errorf("database down at start: %d of %d records failed", len(resp.BatchItemFailures), len(down))
	}
	if e.sandbox.total.Load() != 0 {
		t.Fatal("the provider was called while the jobs could not start")
	}

	// 2. Back up: the next batch runs normally.
	restart()
	first := e.q.receive(10)
	if resp := e.handle(t, worker, first); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("after restart: %v\n%s", resp.BatchItemFailures, tail(e.logs.String(), 3000))
	}

	// 3. The next batch reaches the provider, then the database dies before
	// the results are recorded.
	second := e.q.receive(10)
	g.closed.Store(true)
	respCh := make(chan events.SQSEventResponse)
	go func() {
		resp, err := worker.Handle(context.Background(), events.SQSEvent{Records: second})
		if err != nil {
			t.Error(err)
		}
		respCh <- resp
	}()
	for range second {
		<-g.arrived
	}
	stop()
	g.closed.Store(false)
	close(g.open)
	resp := <-respCh
	e.q.putBack(second, resp)
	if len(resp.BatchItemFailures) != len(second) {
		t.Errorf("database down at record: %d of %d records failed", len(resp.BatchItemFailures), len(second))
	}
	if !strings.Contains(e.logs.String(), "could not record results") {
		t.Error("the lost record was not logged")
	}
	// SQS redelivers them while it is still down.
	redelivered := e.q.receive(10)
	if resp := e.handle(t, worker, redelivered); len(resp.BatchItemFailures) != len(redelivered) {
		t.Errorf("redelivery with the database down: %d of %d failed", len(resp.BatchItemFailures), len(redelivered))
	}

	// 4. Back up: the redeliveries, the dispatcher and the leases finish
	// everything.
	restart()
	st := e.runPipeline(t, 1, 2, 0, 2*time.Minute)

	all := checkEveryRow(t, pool)
	secondIDs := map[string]bool{}
	for _, m := range second {
		secondIDs[mustDecode(t, m.Body)] = true
	}
	firstIDs := map[string]bool{}
	for _, m := range first {
		firstIDs[mustDecode(t, m.Body)] = true
	}
	// The third claim of ten (organizations interleave, so any ten of the
	// thirty): its send failed as the database went down.
	unsentIDs := map[string]bool{}
	for _, id := range ids {
		if !firstIDs[id] && !secondIDs[id] {
			unsentIDs[id] = true
		}
	}
	if len(firstIDs) != 10 || len(secondIDs) != 10 || len(unsentIDs) != 10 {
		t.Fatalf("batches of %d, %d and %d rows, want 10 each", len(firstIDs), len(secondIDs), len(unsentIDs))
	}
	for _, id := range ids {
		r := all[id]
		calls := e.sandbox.callsFor(r.Key)
		var wantAttempts, wantCalls int
		switch {
		case firstIDs[id]:
			wantAttempts, wantCalls = 1, 1
		case secondIDs[id]: // called before the crash, again after the lease with the same key
			wantAttempts, wantCalls = 2, 2
		case unsentIDs[id]: // claimed, never sent, reclaimed after the lease
			wantAttempts, wantCalls = 2, 1
		default:
			t.Fatalf("row %s was in no batch", id)
		}
		if r.Status != "completed" || r.Attempts != wantAttempts || calls != wantCalls {
			t.Errorf("row %s: %s after %d attempts and %d provider calls, want completed after %d and %d",
				id, r.Status, r.Attempts, calls, wantAttempts, wantCalls)
		}
	}
	if len(all) != len(ids) {
		t.Errorf("%d rows, want %d", len(all), len(ids))
	}
	t.Logf("after restart: %d dispatch runs claimed %d, %d records handled, %d provider calls in all",
		st.runs.Load(), st.claimed.Load(), st.handled.Load(), e.sandbox.total.Load())
}

func mustDecode(t *testing.T, body string) string {
	t.Helper()
	m, err := message.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	return m.OutboxID
}
