package health_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/event"
	"integration-outbox/internal/inspect"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/rerun"
)

// A connection whose every call fails for five days (the defaults:
// connection_failing after 1h, disabled after 120h with a 12h span) is
// disabled once: one connection_failing and one connection_disabled
// conflict, one Connection Disabled event; its 200 rows are then held,
// neither claimed nor charged attempts nor dead-lettered. Enabled again
// through the rerun function's enableConnection (audited), every row is
// delivered once, oldest first, its conflicts are resolved and one
// Connection Recovered event is written.
//
// Time is moved, not slept: the statements compare the database's now()
// with the timestamps they stored, so the test moves the connection's
// failing_since back (world.age) instead of injecting a clock into every
// statement of the fleet.
func TestAConnectionFailingForFiveDaysIsDisabledOnceAndRecoversWhenEnabled(t *testing.T) {
	t.Parallel()
	w := newWorld(t, defaults())
	ctx := context.Background()
	rows := w.commands(t, 200)

	// Day 0: the first failures start the failing period; no conflict yet.
	w.attempt(t, 5, false)
	if n := w.conflicts(t, "connection_failing", "open"); n != 0 {
		t.Fatalf("%d connection_failing conflicts after the first failures, want none before 1h", n)
	}
	// Two hours later: one connection_failing conflict, however many
	// batches fail.
	w.age(t, 2*time.Hour)
	w.attempt(t, 5, false)
	w.attempt(t, 5, false)
	if n := w.conflicts(t, "connection_failing", "open"); n != 1 {
		t.Fatalf("%d open connection_failing conflicts after 2h of failures, want 1", n)
	}
	if got := w.publish(t); len(got) != 0 {
		t.Fatalf("events before the connection is disabled: %v", got)
	}

	// Five days of failures: the next failures disable it, once.
	w.age(t, 5*24*time.Hour)
	w.attempt(t, 5, false)
	if n := w.conflicts(t, "connection_disabled", "open"); n != 1 {
		t.Fatalf("%d open connection_disabled conflicts, want 1", n)
	}
	if n := w.recorded(t, event.ConnectionDisabled); n != 1 {
		t.Fatalf("%d Connection Disabled events recorded, want 1", n)
	}
	got := w.publish(t)
	if len(got[event.ConnectionDisabled]) != 1 {
		t.Fatalf("delivered %v, want one Connection Disabled", got)
	}
	// The same five rows were claimed each time (oldest first, due at
	// once): this was their 4th failed attempt, one Command Failing each.
	if n := len(got[event.CommandFailing]); n != 5 || len(got) != 2 {
		t.Fatalf("delivered %d Command Failing events (%d types), want 5 and nothing else", n, len(got))
	}
	requireDetail(t, event.CommandFailing, got[event.CommandFailing][0], "eventId", "organizationId", "connectionId",
		"provider", "occurredAt", "outboxId", "localEntityType", "attempt", "lastError")
	d := got[event.ConnectionDisabled][0]
	requireDetail(t, event.ConnectionDisabled, d, "eventId", "organizationId", "connectionId", "provider", "occurredAt",
		"failingSince", "lastError")
	if d["connectionId"] != w.conn || d["organizationId"] != w.org || d["provider"] != "webhook" ||
		d["lastError"] != "HTTP 503: upstream unavailable" {
		t.Errorf("Connection Disabled detail %v", d)
	}
	if since, err := time.Parse(time.RFC3339, d["failingSince"].(string)); err != nil || time.Since(since) < 5*24*time.Hour {
		t.Errorf("failingSince %v (%v), want over five days ago", d["failingSince"], err)
	}

	// Disabled: nothing is claimed, nothing is charged or dead-lettered,
	// and no run waits for its rows.
	before := w.attempts(t)
	for range 3 {
		b, err := w.store.ClaimBatch(ctx, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute, OrganizationID: w.org})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Claims) != 0 || b.Held {
			t.Fatalf("claimed %d rows (held %v) of a disabled connection", len(b.Claims), b.Held)
		}
		if n, err := w.store.DeadLetterExpired(ctx, outbox.ClaimParams{MaxAttempts: 1}); err != nil || n != 0 {
			t.Fatalf("dead-lettered %d held rows (%v), want none", n, err)
		}
	}
	if after := w.attempts(t); after != before {
		t.Fatalf("attempts went from %d to %d while disabled", before, after)
	}
	if n := w.f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1 and status in ('queued', 'failed')`, w.org); n != 200 {
		t.Fatalf("%d rows waiting, want all 200 held", n)
	}

	// The inspect function's stuck view shows it, since when and why; another
	// organization's does not.
	insp := inspect.New(w.f.Pool, inspect.Config{})
	view, err := insp.Handle(ctx, json.RawMessage(`{"organizationId":"`+w.org+`","stuck":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if cs := view.Stuck.Connections; len(cs) != 1 || cs[0].ConnectionID != w.conn || cs[0].State != "disabled" ||
		time.Since(cs[0].Since) > time.Minute || cs[0].FailingSince == nil || cs[0].Waiting != 200 ||
		!strings.Contains(cs[0].Reason, "HTTP 503") {
		t.Errorf("stuck view connections %+v, want the disabled one, since now, with its 200 rows and why", cs)
	}
	other, err := insp.Handle(ctx, json.RawMessage(`{"organizationId":"`+w.f.NewID(t)+`","stuck":true}`))
	if err != nil || len(other.Stuck.Connections) != 0 {
		t.Errorf("another organization's stuck view: %+v, %v", other.Stuck, err)
	}

	// Enabled from the console.
	rr, err := rerun.New(w.f.Pool, nil, rerun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]string{"organizationId": w.org, "enableConnection": w.conn,
		"reason": "the supplier's endpoint is back", "requestedBy": "ops"})
	res, err := rr.Handle(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}
	if res.EnabledConnection == nil || !res.EnabledConnection.WasDisabled {
		t.Fatalf("enableConnection answered %+v", res.EnabledConnection)
	}
	if n := w.f.Count(t, `select count(*) from external_integration_rerun_audit
		where organization_id = $1 and payload ->> 'enableConnection' = $2 and requested_by = 'ops'`, w.org, w.conn); n != 1 {
		t.Fatalf("%d audit rows for the enableConnection, want 1", n)
	}

	// Every row delivered once, oldest first.
	var order []string
	for range 10 {
		claims := w.attempt(t, 50, true)
		if len(claims) == 0 {
			break
		}
		for _, c := range claims {
			order = append(order, c.ID)
		}
	}
	if !slices.Equal(order, rows) {
		t.Fatalf("delivered %d rows, want the 200 once each, oldest first", len(order))
	}
	if n := w.f.Count(t, `select count(*) from external_integration_attempts where organization_id = $1 and outcome = 'completed'`, w.org); n != 200 {
		t.Fatalf("%d completed attempts, want 200", n)
	}
	if n := w.recorded(t, event.ConnectionRecovered); n != 1 {
		t.Fatalf("%d Connection Recovered events recorded, want 1", n)
	}
	for _, typ := range []string{"connection_failing", "connection_disabled"} {
		if open, resolved := w.conflicts(t, typ, "open"), w.conflicts(t, typ, "resolved"); open != 0 || resolved != 1 {
			t.Errorf("%s conflicts: %d open, %d resolved; want it resolved", typ, open, resolved)
		}
	}
	got = w.publish(t)
	if len(got[event.ConnectionRecovered]) != 1 || len(got) != 1 {
		t.Fatalf("delivered %v, want one Connection Recovered", got)
	}
	requireDetail(t, event.ConnectionRecovered, got[event.ConnectionRecovered][0],
		"eventId", "organizationId", "connectionId", "provider", "occurredAt", "failingSince")
}
