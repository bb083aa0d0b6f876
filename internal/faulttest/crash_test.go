package faulttest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// The step of a job at which its invocation dies.
type step int

const (
	neverStarted step = iota // the message is lost: the job is claimed, never started
	afterStart               // started, before the provider call
	duringCall               // while the provider handles the request
	afterAnswer              // the provider answered, the result is not recorded yet
)

func (s step) String() string {
	return [...]string{"claimed, never started", "after start", "during the provider call", "after the answer"}[s]
}

// dyingStore is the worker's store in an invocation that dies at a step:
// it cancels the invocation's context there, and, when the process dies
// (dead), no result is ever recorded.
type dyingStore struct {
	real   *outbox.Store
	at     step
	dead   bool
	cancel context.CancelFunc
}

func (d *dyingStore) Start(ctx context.Context, reqs []outbox.StartRequest) ([]outbox.Job, error) {
	jobs, err := d.real.Start(ctx, reqs)
	if d.at == afterStart {
		d.cancel()
	}
	return jobs, err
}

func (d *dyingStore) Record(ctx context.Context, outcomes []outbox.Outcome) (outbox.Recorded, error) {
	if d.at == afterAnswer {
		d.cancel()
	}
	if d.dead {
		return outbox.Recorded{}, errors.New("injected: the process died before recording")
	}
	return d.real.Record(ctx, outcomes)
}

// idempotentProvider answers 200 with an id the first time it sees an
// idempotency key and 409 (already done) after that. When hold is set, its
// first request calls hold and waits for the caller to hang up.
func idempotentProvider(hold func()) testenv.Answer {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(n int, w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if n == 1 && hold != nil {
			hold()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		mu.Lock()
		again := seen[key]
		seen[key] = true
		mu.Unlock()
		if again {
			w.WriteHeader(http.StatusConflict)
		}
		fmt.Fprintf(w, `{"id":"EXT-%s"}`, key)
	}
}

// idempotentCommand inserts one command of a new organization to a webhook
// receiver answering as idempotentProvider(hold) does, and returns the
// receiver, the organization, the command and its idempotency key.
func (e *env) idempotentCommand(t *testing.T, hold func()) (rc *testenv.Receiver, org, id, key string) {
	t.Helper()
	rc = testenv.NewReceiver(t, idempotentProvider(hold))
	org = e.f.NewID(t)
	id = e.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 2,
		Connection: testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
			Config: map[string]string{"url": rc.URL}}}).CommandID
	return rc, org, id, rows(t, e.f.Pool)[id].Key
}

// TestWorkerDiesBetweenStartAndRecord kills the invocation (its context
// cancelled, and no result ever recorded) at each step of a job. The row
// keeps its lease (a started job's until the dead invocation's deadline plus
// the record reserve), is claimed again once the lease expires, and is
// delivered again with the same Idempotency-Key; the dead invocation's
// message and its token can no longer change anything.
func TestWorkerDiesBetweenStartAndRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		at        step
		wantCalls int // provider requests in all
	}{
		{neverStarted, 1},
		{afterStart, 1},
		{duringCall, 2},
		{afterAnswer, 2},
	} {
		t.Run(tc.at.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// A short Lambda-like deadline: the lease of a started job
			// lasts until it (plus the record reserve), not longer.
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
			defer cancel()
			var hold func()
			if tc.at == duringCall {
				hold = cancel
			}
			rc, org, id, key := e.idempotentCommand(t, hold)

			if s := e.dispatch(t, 3*time.Second); s.Dispatched != 1 {
				t.Fatalf("dispatch %+v", s)
			}
			first := e.q.receive(10)
			if tc.at != neverStarted {
				dying := e.worker(t, workerOpts{store: &dyingStore{real: e.store, at: tc.at, dead: true, cancel: cancel}})
				if _, err := dying.Handle(ctx, events.SQSEvent{Records: first}); err != nil {
					t.Fatal(err)
				}
			}

			// The dead invocation left the row recoverable: processing under
			// its lease, never without one.
			r := rows(t, e.f.Pool)[id]
			if r.Status != "processing" || !r.Leased || r.Started != (tc.at != neverStarted) || r.Attempts != 1 {
				t.Fatalf("after the death: %+v", r)
			}
			checkEveryRow(t, e.f.Pool)

			waitLeaseExpired(t, e.f.Pool, []string{id})
			s := e.dispatch(t, 15*time.Minute)
			if s.Claimed != 1 || s.Dispatched != 1 {
				t.Fatalf("reclaim after the lease: %+v", s)
			}
			if !strings.Contains(e.logs.String(), "lease expired; row claimed again") {
				t.Error("the reclaim was not logged")
			}
			e.drain(t, e.worker(t, workerOpts{}))

			// The dead invocation's message, delivered late, and its token
			// change nothing.
			if resp := e.handle(t, e.worker(t, workerOpts{}), first); len(resp.BatchItemFailures) != 0 {
				t.Errorf("stale message reported as failure: %v", resp.BatchItemFailures)
			}
			stale := e.q.messages()[0]
			recorded, err := e.store.Record(context.Background(), []outbox.Outcome{{OutboxID: id, OrganizationID: org,
				ConnectionID: stale.ConnectionID, ClaimToken: stale.ClaimToken, Status: outbox.StatusFailed,
				LastError: "zombie", RetryIn: time.Hour}})
			if err != nil || len(recorded.IDs) != 0 {
				t.Errorf("record with the dead invocation's token: %v %v, want nothing recorded", recorded, err)
			}

			r = checkEveryRow(t, e.f.Pool)[id]
			if r.Status != "completed" || r.Attempts != 2 || r.ProviderReference != "EXT-"+key {
				t.Errorf("final row %+v", r)
			}
			keys := rc.Keys()
			if len(keys) != tc.wantCalls {
				t.Errorf("provider got %d requests, want %d", len(keys), tc.wantCalls)
			}
			for _, k := range keys {
				if k != key {
					t.Errorf("request with Idempotency-Key %q, want the row's %q every time", k, key)
				}
			}
		})
	}
}

// TestCancelledInvocationStillRecords cancels an invocation's context at
// each step with the database up: the worker records what it knows (a
// retryable failure, or the provider's answer), so no row waits for its
// lease, and the retry carries the same Idempotency-Key.
func TestCancelledInvocationStillRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		at         step
		wantStatus string
		wantCalls  int // after the retry
	}{
		{afterStart, "failed", 1},
		{duringCall, "failed", 2},
		{afterAnswer, "completed", 1},
	} {
		t.Run(tc.at.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var hold func()
			if tc.at == duringCall {
				hold = cancel
			}
			rc, _, id, key := e.idempotentCommand(t, hold)
			e.dispatch(t, 15*time.Minute)

			w := e.worker(t, workerOpts{store: &dyingStore{real: e.store, at: tc.at, cancel: cancel}})
			resp, err := w.Handle(ctx, events.SQSEvent{Records: e.q.receive(10)})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle = %v, %v", resp, err)
			}
			r := checkEveryRow(t, e.f.Pool)[id]
			if r.Status != tc.wantStatus || r.Leased {
				t.Fatalf("after the cancellation: %+v, want %s without a lease", r, tc.wantStatus)
			}
			if r.Status == "failed" {
				if r.NextIn == nil || *r.NextIn < 25 || *r.NextIn > 31 || !strings.Contains(r.LastError, "canceled") {
					t.Errorf("failed row not scheduled ≈30s with its cause: %+v", r)
				}
				// Time passes: the retry is due.
				if _, err := e.f.Pool.Exec(context.Background(), `update external_integration_outbox
					set next_attempt_at = now() where id = $1`, id); err != nil {
					t.Fatal(err)
				}
				e.dispatch(t, 15*time.Minute)
				e.drain(t, e.worker(t, workerOpts{}))
			}
			r = checkEveryRow(t, e.f.Pool)[id]
			if r.Status != "completed" {
				t.Errorf("final row %+v", r)
			}
			keys := rc.Keys()
			if len(keys) != tc.wantCalls {
				t.Errorf("provider got %d requests, want %d", len(keys), tc.wantCalls)
			}
			for _, k := range keys {
				if k != key {
					t.Errorf("Idempotency-Key %q, want %q", k, key)
				}
			}
		})
	}
}
