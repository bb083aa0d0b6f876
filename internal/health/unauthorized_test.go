package health_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/event"
	"integration-outbox/internal/health"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
)

// MarkUnauthorized belongs to the caller's transaction: rolled back, nothing
// is recorded; committed, the connection's rows are held (attempts
// unchanged), one connection_unauthorized conflict opens and one Connection
// Unauthorized event is published; a repeat changes nothing. Reauthorized
// lets its rows go again, and the first delivery resolves the conflict and
// publishes one Connection Recovered.
func TestMarkUnauthorizedHoldsTheConnectionUntilItDeliversAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, defaults())
	ctx := context.Background()
	w.commands(t, 3)
	u := health.Unauthorized{OrganizationID: w.org, ConnectionID: w.conn, Reason: "invalid_grant: refresh token revoked", Events: true}

	rollback := errors.New("the caller's transaction fails")
	err := pgtx.Do(ctx, w.f.Pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if marked, err := health.MarkUnauthorized(ctx, tx, u); err != nil || !marked {
			t.Fatalf("marked %v: %v", marked, err)
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	if n := w.recorded(t, event.ConnectionUnauthorized) + w.conflicts(t, "connection_unauthorized", "open"); n != 0 {
		t.Fatalf("a rolled-back mark left %d events and conflicts", n)
	}

	for i, want := range []bool{true, false} {
		marked, err := health.MarkUnauthorized(ctx, w.f.Pool, u)
		if err != nil || marked != want {
			t.Fatalf("call %d: marked %v (%v), want %v", i+1, marked, err, want)
		}
	}
	if n := w.conflicts(t, "connection_unauthorized", "open"); n != 1 {
		t.Fatalf("%d open connection_unauthorized conflicts, want 1", n)
	}
	got := w.publish(t)
	if len(got[event.ConnectionUnauthorized]) != 1 || len(got) != 1 {
		t.Fatalf("delivered %v, want one Connection Unauthorized", got)
	}
	d := got[event.ConnectionUnauthorized][0]
	requireDetail(t, event.ConnectionUnauthorized, d, "eventId", "organizationId", "connectionId", "provider", "occurredAt", "lastError")
	if d["lastError"] != u.Reason {
		t.Errorf("lastError %v, want the reason", d["lastError"])
	}

	if claims := w.attempt(t, 10, true); len(claims) != 0 {
		t.Fatalf("claimed %d rows of an unauthorized connection", len(claims))
	}
	if n := w.attempts(t); n != 0 {
		t.Fatalf("%d attempts charged while unauthorized", n)
	}
	if _, err := health.MarkUnauthorized(ctx, w.f.Pool, health.Unauthorized{OrganizationID: w.f.NewID(t), ConnectionID: w.conn}); !errors.Is(err, health.ErrNoConnection) {
		t.Errorf("another organization's connection: %v, want ErrNoConnection", err)
	}

	if ok, _, _, err := health.Reauthorized(ctx, w.f.Pool, w.org, w.conn, ""); err != nil || !ok {
		t.Fatalf("reauthorized %v: %v", ok, err)
	}
	if claims := w.attempt(t, 10, true); len(claims) != 3 {
		t.Fatalf("delivered %d rows after reauthorization, want 3", len(claims))
	}
	if open, resolved := w.conflicts(t, "connection_unauthorized", "open"), w.conflicts(t, "connection_unauthorized", "resolved"); open != 0 || resolved != 1 {
		t.Errorf("connection_unauthorized conflicts: %d open, %d resolved", open, resolved)
	}
	got = w.publish(t)
	if len(got[event.ConnectionRecovered]) != 1 || len(got) != 1 {
		t.Fatalf("delivered %v, want one Connection Recovered", got)
	}
}

// Events off (EVENT_BUS_NAME empty): the state, the disable and the
// conflicts work the same, and no event is written at all.
func TestWithEventsOffNothingIsRecorded(t *testing.T) {
	t.Parallel()
	h := outbox.DefaultHealth()
	h.DisableAfter, h.DisableMinSpan, h.FailingAfter = time.Second, time.Second, time.Second
	w := newWorld(t, h)
	ctx := context.Background()
	w.commands(t, 3)
	for range 4 {
		w.attempt(t, 3, false)
		w.age(t, time.Minute)
	}
	w.attempt(t, 3, false)
	if n := w.conflicts(t, "connection_disabled", "open"); n != 1 {
		t.Fatalf("%d connection_disabled conflicts, want 1", n)
	}
	if _, err := health.MarkUnauthorized(ctx, w.f.Pool, health.Unauthorized{OrganizationID: w.org, ConnectionID: w.conn}); err != nil {
		t.Fatal(err)
	}
	if n := w.f.Count(t, `select count(*) from integration_outbox_events`); n != 0 {
		t.Fatalf("%d events written with events off", n)
	}
}

// A caller that opened its own connection_unauthorized conflict passes its
// id: no second conflict opens, and that one is resolved when the
// connection delivers again.
func TestMarkUnauthorizedAdoptsTheCallersConflict(t *testing.T) {
	t.Parallel()
	w := newWorld(t, defaults())
	ctx := context.Background()
	w.commands(t, 1)
	var own string
	if err := w.f.Pool.QueryRow(ctx, `insert into external_integration_conflicts (organization_id, integration_connection_id,
		conflict_type, severity, summary, status) values ($1, $2, 'connection_unauthorized', 'high', 'reconnect it', 'open')
		returning id::text`, w.org, w.conn).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if marked, err := health.MarkUnauthorized(ctx, w.f.Pool, health.Unauthorized{OrganizationID: w.org, ConnectionID: w.conn,
		Reason: "invalid_grant", Events: true, ConflictID: own}); err != nil || !marked {
		t.Fatalf("marked %v: %v", marked, err)
	}
	if n := w.conflicts(t, "connection_unauthorized", "open"); n != 1 {
		t.Fatalf("%d open connection_unauthorized conflicts, want the caller's one", n)
	}
	if _, _, _, err := health.Reauthorized(ctx, w.f.Pool, w.org, w.conn, ""); err != nil {
		t.Fatal(err)
	}
	w.attempt(t, 1, true)
	var status string
	if err := w.f.Pool.QueryRow(ctx, `select status from external_integration_conflicts where id = $1`, own).Scan(&status); err != nil || status != "resolved" {
		t.Fatalf("the caller's conflict is %q (%v), want resolved", status, err)
	}
	if got := w.publish(t); len(got[event.ConnectionUnauthorized]) != 1 || len(got[event.ConnectionRecovered]) != 1 {
		t.Fatalf("delivered %v, want one Connection Unauthorized and one Connection Recovered", got)
	}
}

// Reconnected by the host: Reauthorized with a resolution ends the hold and
// resolves the conflict MarkUnauthorized opened, at once; the first call
// that goes through then writes Connection Recovered.
func TestReauthorizedWithAResolutionResolvesTheConflictAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, defaults())
	ctx := context.Background()
	w.commands(t, 1)
	if marked, err := health.MarkUnauthorized(ctx, w.f.Pool, health.Unauthorized{OrganizationID: w.org, ConnectionID: w.conn,
		Reason: "invalid_grant", Events: true}); err != nil || !marked {
		t.Fatalf("marked %v: %v", marked, err)
	}
	ended, resolved, _, err := health.Reauthorized(ctx, w.f.Pool, w.org, w.conn, "The connection was reconnected.")
	if err != nil || !ended || resolved != 1 {
		t.Fatalf("Reauthorized = %v, %d, %v; want the hold ended and one conflict resolved", ended, resolved, err)
	}
	if n := w.conflicts(t, "connection_unauthorized", "resolved"); n != 1 {
		t.Fatalf("%d resolved connection_unauthorized conflicts, want 1", n)
	}
	w.attempt(t, 1, true)
	if got := w.publish(t); len(got[event.ConnectionUnauthorized]) != 1 || len(got[event.ConnectionRecovered]) != 1 {
		t.Fatalf("delivered %v, want one Connection Unauthorized and one Connection Recovered", got)
	}
}
