package health_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"integration-outbox/internal/event"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}

// world is one test's database, connection, outbox store and event bus.
type world struct {
	f     *testenv.Fixture
	store *outbox.Store
	org   string
	conn  string
	bus   *testenv.EventBus
	pub   *event.Publisher
}

// health is the configuration's defaults with events on.
func defaults() outbox.Health {
	h := outbox.DefaultHealth()
	h.Events = true
	return h
}

func newWorld(t *testing.T, h outbox.Health) world {
	t.Helper()
	f := pg.NewDB(t)
	org := f.NewID(t)
	bus := testenv.NewEventBus(t, moto, event.Source)
	pub, err := event.NewPublisher(f.Pool, bus.Client, event.Config{BusName: bus.Name})
	if err != nil {
		t.Fatal(err)
	}
	return world{f: f, store: outbox.NewStore(f.Pool).WithHealth(h), org: org, bus: bus, pub: pub,
		conn: f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook"})}
}

// commands inserts n queued rows of the world's connection, a second apart
// in created_at, oldest first, and returns their ids in that order.
func (w world) commands(t *testing.T, n int) []string {
	t.Helper()
	base := time.Now().Add(-time.Duration(n+60) * time.Second)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = w.f.Command(t, testenv.CommandOpts{OrganizationID: w.org, ConnectionID: w.conn,
			CreatedAt: base.Add(time.Duration(i) * time.Second)})
	}
	return ids
}

// attempt claims up to n rows of the organization, starts them and records
// each as a provider call that succeeded or failed with a retryable error
// (due again at once), as the push worker does. It returns the claims.
func (w world) attempt(t *testing.T, n int, ok bool) []outbox.Claim {
	t.Helper()
	ctx := context.Background()
	claims, err := w.store.Claim(ctx, outbox.ClaimParams{Limit: n, MaxAttempts: 10, Lease: time.Minute, OrganizationID: w.org})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) == 0 {
		return nil
	}
	reqs := make([]outbox.StartRequest, len(claims))
	for i, c := range claims {
		reqs[i] = outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken}
	}
	jobs, err := w.store.Start(ctx, reqs)
	if err != nil || len(jobs) != len(claims) {
		t.Fatalf("started %d of %d claims: %v", len(jobs), len(claims), err)
	}
	outcomes := make([]outbox.Outcome, len(claims))
	for i, c := range claims {
		o := outbox.Outcome{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
			ClaimToken: c.ClaimToken, ProviderCalled: true, CallStartedAt: time.Now(), CallFinishedAt: time.Now()}
		if ok {
			o.Status, o.Circuit, o.HTTPStatus, o.ProviderReference = outbox.StatusCompleted, outbox.CircuitSuccess, 200, "ref-"+c.ID
		} else {
			o.Status, o.Circuit, o.HTTPStatus = outbox.StatusFailed, outbox.CircuitFailure, 503
			o.LastError = "HTTP 503: upstream unavailable"
		}
		outcomes[i] = o
	}
	r, err := w.store.Record(ctx, outcomes)
	if err != nil || len(r.IDs) != len(claims) {
		t.Fatalf("recorded %d of %d: %v", len(r.IDs), len(claims), err)
	}
	return claims
}

// age moves the connection's failing period back by d: the statements
// compare the database's now() with the stored timestamps, so this is the
// same as d having passed.
func (w world) age(t *testing.T, d time.Duration) {
	t.Helper()
	if _, err := w.f.Pool.Exec(context.Background(), `update integration_outbox_connection_state
		set failing_since = failing_since - make_interval(secs => $2), last_failure_at = last_failure_at - make_interval(secs => $2)
		where connection_id = $1`, w.conn, d.Seconds()); err != nil {
		t.Fatal(err)
	}
}

// conflicts counts the connection's conflicts of a type and status.
func (w world) conflicts(t *testing.T, conflictType, status string) int {
	t.Helper()
	return w.f.Count(t, `select count(*) from external_integration_conflicts
		where integration_connection_id = $1 and conflict_type = $2 and status = $3`, w.conn, conflictType, status)
}

// recorded counts the events of a detail type written for the organization.
func (w world) recorded(t *testing.T, detailType string) int {
	t.Helper()
	return w.f.Count(t, `select count(*) from integration_outbox_events where organization_id = $1 and detail_type = $2`,
		w.org, detailType)
}

// publish publishes every pending event and returns what the bus's rule
// delivered to its queue, by detail type.
func (w world) publish(t *testing.T) map[string][]map[string]any {
	t.Helper()
	if _, err := w.pub.PublishPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]any{}
	for _, e := range w.bus.Drain(t) {
		if e.Source != event.Source {
			t.Errorf("source %q, want %q", e.Source, event.Source)
		}
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatal(err)
		}
		out[e.DetailType] = append(out[e.DetailType], d)
	}
	return out
}

// attempts sums the attempts of the rows.
func (w world) attempts(t *testing.T) int {
	t.Helper()
	return w.f.Count(t, `select coalesce(sum(attempt_count), 0)::int from external_integration_outbox where organization_id = $1`, w.org)
}

// requireDetail fails unless d has every key, with a non-empty value.
func requireDetail(t *testing.T, detailType string, d map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := d[k]; !ok || v == "" || v == nil {
			t.Errorf("%s: detail has no %s: %v", detailType, k, d)
		}
	}
}
