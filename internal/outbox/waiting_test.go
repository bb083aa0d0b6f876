package outbox_test

import (
	"context"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// A row recorded as waiting for another keeps its attempts and names that
// row; when the awaited row's end is recorded, the waiting row is due at
// once, and a row recorded as waiting for one that has already ended is due
// at once too (the wake came before it). A row waiting for a row that fails
// and will be retried stays waiting.
func TestARowWaitingForAnotherIsDueOnceThatOneEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// start claims what is due and starts the rows named; each must be
	// among the claimed.
	start := func(names ...string) map[string]outbox.Claim {
		t.Helper()
		claims, err := b.store.Claim(ctx, params(10))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]outbox.Claim{}
		for _, c := range claims {
			got[c.ID] = c
		}
		for _, id := range names {
			c, ok := got[id]
			if !ok {
				t.Fatalf("row %s not claimed (claimed %v)", id, ids(claims))
			}
			if _, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: id, OrganizationID: b.org,
				ConnectionID: b.conn, ClaimToken: c.ClaimToken}}); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	record := func(o outbox.Outcome) {
		t.Helper()
		o.OrganizationID, o.ConnectionID = b.org, b.conn
		if got, err := b.store.Record(ctx, []outbox.Outcome{o}); err != nil || len(got.IDs) != 1 {
			t.Fatalf("record %s = %v, %v", o.OutboxID, got, err)
		}
	}
	waitFor := func(id string, c outbox.Claim, awaited string) {
		t.Helper()
		record(outbox.Outcome{OutboxID: id, ClaimToken: c.ClaimToken, Status: outbox.StatusFailed,
			LastError: "waiting for " + awaited, RetryIn: time.Hour, Uncharged: true, WaitingFor: awaited})
	}
	waitingFor := func(id string) *string {
		var w *string
		if err := b.f.Pool.QueryRow(ctx, `select waiting_for_outbox_id::text from external_integration_outbox where id = $1`, id).Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}

	awaited := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, CommandType: "push_supplier",
		EntityID: b.f.NewID(t), Payload: map[string]any{"name": "S"}, CreatedAt: time.Now().Add(-time.Minute)})
	waiter := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	cs := start(awaited, waiter)
	ac := cs[awaited]
	waitFor(waiter, cs[waiter], awaited)
	r := b.f.Row(t, waiter)
	if w := waitingFor(waiter); r.Status != "failed" || r.AttemptCount != 0 || w == nil || *w != awaited ||
		r.RetryInSeconds == nil || *r.RetryInSeconds < 3500 {
		t.Fatalf("waiting row = %+v, waiting for %v; want failed, no attempt used, waiting an hour for %s", r, w, awaited)
	}

	// The awaited row fails, to be retried: the waiting row still waits.
	record(outbox.Outcome{OutboxID: awaited, ClaimToken: ac.ClaimToken, Status: outbox.StatusFailed, LastError: "503", RetryIn: 0})
	if r := b.f.Row(t, waiter); *r.RetryInSeconds < 3500 {
		t.Fatalf("a retryable failure of the awaited row woke the waiting one: %+v", r)
	}
	// It completes: the waiting row is due now.
	ac = start(awaited)[awaited]
	record(outbox.Outcome{OutboxID: awaited, ClaimToken: ac.ClaimToken, Status: outbox.StatusCompleted, ProviderReference: "C-1"})
	if r := b.f.Row(t, waiter); r.RetryInSeconds == nil || *r.RetryInSeconds > 1 || r.Status != "failed" {
		t.Fatalf("after the awaited row completed, the waiting row = %+v; want due now", r)
	}

	// Claimed again, it waits for nothing until its record says so.
	if _, err := b.store.Claim(ctx, params(10)); err != nil {
		t.Fatal(err)
	}
	if w := waitingFor(waiter); w != nil {
		t.Errorf("a claimed row still waits for %s", *w)
	}
	// (Put back as a release would: its attempt given back.)
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set status = 'failed', claim_token = null, attempt_count = attempt_count - 1,
		lease_expires_at = null, next_attempt_at = null where id = $1`, waiter); err != nil {
		t.Fatal(err)
	}

	// Waiting for a row that has already ended: due at once; the row's
	// next record clears what it waited for.
	waitFor(waiter, start(waiter)[waiter], awaited)
	if r := b.f.Row(t, waiter); r.RetryInSeconds == nil || *r.RetryInSeconds > 1 || r.AttemptCount != 0 {
		t.Fatalf("waiting for an ended row = %+v; want due now, no attempt used", r)
	}
	record(outbox.Outcome{OutboxID: waiter, ClaimToken: start(waiter)[waiter].ClaimToken, Status: outbox.StatusCompleted})
	if r, w := b.f.Row(t, waiter), waitingFor(waiter); r.Status != "completed" || r.AttemptCount != 1 || w != nil {
		t.Errorf("delivered row = %+v, waiting for %v; want completed after one charged attempt, waiting for nothing", r, w)
	}
}

// An awaited row that a dispatch run ends (attempts exhausted) wakes the
// rows waiting for it too: they are due at once, their command's load then
// finds nothing to wait for.
func TestARowWaitingForAnExhaustedOneIsDueWhenItIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	awaited := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, CommandType: "push_supplier",
		EntityID: b.f.NewID(t), Payload: map[string]any{"name": "S"}, Status: "failed", AttemptCount: 10})
	later := time.Now().Add(time.Hour)
	waiter := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
		Status: "failed", NextAttemptAt: &later})
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set waiting_for_outbox_id = $1 where id = $2`, awaited, waiter); err != nil {
		t.Fatal(err)
	}
	if n, err := b.store.DeadLetterExpired(ctx, params(10)); err != nil || n != 1 {
		t.Fatalf("DeadLetterExpired = %d, %v; want the awaited row", n, err)
	}
	if r := b.f.Row(t, awaited); r.Status != "dead_letter" {
		t.Fatalf("awaited row %+v", r)
	}
	if r := b.f.Row(t, waiter); r.Status != "failed" || r.RetryInSeconds == nil || *r.RetryInSeconds > 1 {
		t.Errorf("waiting row %+v; want it due now", r)
	}
}
