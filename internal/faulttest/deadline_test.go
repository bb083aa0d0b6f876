package faulttest

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// timedStore notes whether the invocation's context was still alive when
// the worker recorded its results.
type timedStore struct {
	real     *outbox.Store
	mu       sync.Mutex
	records  int
	expired  int // records made after the invocation's deadline
	deadline time.Time
}

func (s *timedStore) Start(ctx context.Context, reqs []outbox.StartRequest) ([]outbox.Job, error) {
	return s.real.Start(ctx, reqs)
}

func (s *timedStore) Record(ctx context.Context, outcomes []outbox.Outcome) (outbox.Recorded, error) {
	s.mu.Lock()
	s.records++
	if !time.Now().Before(s.deadline) {
		s.expired++
	}
	s.mu.Unlock()
	return s.real.Record(ctx, outcomes)
}

// TestSlowProviderIsCutBeforeTheDeadline gives an invocation RecordReserve
// + 2s and a provider that never answers in time: the call is cut before the
// deadline, and the result (failed, retryable, with backoff) is recorded
// while the invocation is still alive.
func TestSlowProviderIsCutBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	const reserve = time.Second
	for _, tc := range []struct {
		name     string
		left     time.Duration // time left in the invocation
		webhook  bool          // a webhook that hangs, else a sandbox with a minute of latency
		wantErr  string
		wantCall bool
	}{
		{"webhook that never answers", reserve + 2*time.Second, true, "timed out", true},
		{"sandbox a minute slow", reserve + 2*time.Second, false, "cut short", true},
		{"less time left than the reserve", reserve / 2, true, "not enough time left", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			hungUp := make(chan struct{}, 1)
			rc := testenv.NewReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
					hungUp <- struct{}{}
				case <-time.After(20 * time.Second):
				}
			})
			org := e.f.NewID(t)
			connOpts := testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"latencyMs": 60000}}
			if tc.webhook {
				connOpts = testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook", Config: map[string]string{"url": rc.URL}}
			}
			id := e.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Connection: connOpts}).CommandID
			e.dispatch(t, 15*time.Minute)

			deadline := time.Now().Add(tc.left)
			store := &timedStore{real: e.store, deadline: deadline}
			w := e.worker(t, workerOpts{store: store, timeout: 10 * time.Second, recordReserve: reserve})
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			resp, err := w.Handle(ctx, events.SQSEvent{Records: e.q.receive(10)})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle = %v, %v", resp.BatchItemFailures, err)
			}
			if store.records != 1 || store.expired != 0 {
				t.Errorf("%d records, %d of them after the deadline; want 1 before it", store.records, store.expired)
			}
			r := checkEveryRow(t, e.f.Pool)[id]
			if r.Status != "failed" || r.NextIn == nil || *r.NextIn < 25 || *r.NextIn > 31 || !strings.Contains(r.LastError, tc.wantErr) {
				t.Errorf("row %+v, want failed, retry in ≈30s, last_error with %q", r, tc.wantErr)
			}
			calls := rc.Calls() + int(e.sandbox.total.Load())
			if calls != map[bool]int{true: 1, false: 0}[tc.wantCall] {
				t.Errorf("provider calls %d", calls)
			}
			if tc.webhook && tc.wantCall {
				select {
				case <-hungUp:
				case <-time.After(5 * time.Second):
					t.Error("the webhook's request was not cut off")
				}
			}
		})
	}
}

// hangingSecrets is a Secrets Manager that accepts calls and never answers
// before the caller gives up; each call reports on returned when it ends.
type hangingSecrets struct{ returned chan struct{} }

func (h hangingSecrets) GetSecretValue(ctx context.Context, _ *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	return nil, h.hang(ctx)
}

func (h hangingSecrets) DescribeSecret(ctx context.Context, _ *secretsmanager.DescribeSecretInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error) {
	return nil, h.hang(ctx)
}

func (h hangingSecrets) hang(ctx context.Context) error {
	defer func() { h.returned <- struct{}{} }()
	<-ctx.Done()
	return ctx.Err()
}

// TestSlowSecretsManagerIsCutBeforeTheDeadline: a Secrets Manager that
// hangs must not eat the time the worker keeps to record the result.
func TestSlowSecretsManagerIsCutBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	const reserve = time.Second
	e := newEnv(t)
	hanging := hangingSecrets{returned: make(chan struct{}, 8)}
	t.Cleanup(func() { <-hanging.returned }) // the resolver's detached fetch ends at its FetchTimeout
	resolver, err := credential.NewResolver(hanging, credential.ResolverConfig{Region: "us-east-1",
		FetchTimeout: 4 * time.Second}) // longer than the invocation: only the worker's cut ends the wait
	if err != nil {
		t.Fatal(err)
	}
	rc := testenv.NewReceiver(t, testenv.Reply(200, `{}`))
	org := e.f.NewID(t)
	id := e.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{
		Connection: testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
			CredentialReference: "integrations/hanging", Config: map[string]string{"url": rc.URL}}}).CommandID
	e.dispatch(t, 15*time.Minute)

	deadline := time.Now().Add(reserve + 2*time.Second)
	store := &timedStore{real: e.store, deadline: deadline}
	w := e.worker(t, workerOpts{store: store, creds: resolver, recordReserve: reserve})
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := w.Handle(ctx, events.SQSEvent{Records: e.q.receive(10)})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("Handle = %v, %v; want the result recorded, no batch item failure", resp.BatchItemFailures, err)
	}
	if store.expired != 0 {
		t.Errorf("%d of %d records after the deadline", store.expired, store.records)
	}
	r := checkEveryRow(t, e.f.Pool)[id]
	if r.Status != "failed" || r.NextIn == nil || !strings.Contains(r.LastError, "secrets manager unavailable") {
		t.Errorf("row %+v, want failed (retryable) naming Secrets Manager", r)
	}
	if rc.Calls() != 0 {
		t.Errorf("provider called %d times without a credential", rc.Calls())
	}
}
