package outbox_test

import (
	"context"
	"fmt"
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

// The race of two records: an order's record of its wait for a push and
// the push's record of its end, at the same moment. Each statement takes
// its snapshot before the other commits, so the order's record sees the
// push in flight and the push's record does not see the wait: the order
// is left waiting an hour for a push that has ended. The next sweep (each
// dispatch run's, when a row waits) makes it due; a waiting row whose
// awaited row is still in flight, or that is due already, it leaves as it
// is. The race is reproduced, not drawn: a transaction holds the order's
// start until the push's record has committed.
func TestAWaitRecordedBesideTheEndOfItsAwaitedRowIsDueAtTheNextSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// The push on a connection of its own: the two records then share no
	// connection-state row, and only the start held below orders them.
	pushConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Config: map[string]any{"ordered": false}})
	push := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: pushConn, CommandType: "push_supplier",
		EntityID: b.f.NewID(t), Payload: map[string]any{"name": "S"}, CreatedAt: time.Now().Add(-2 * time.Minute)})
	stillInFlight := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: pushConn, CommandType: "push_supplier",
		EntityID: b.f.NewID(t), Payload: map[string]any{"name": "T"}, CreatedAt: time.Now().Add(-time.Minute)})
	order := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	other := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	claims, err := b.store.Claim(ctx, params(10))
	if err != nil || len(claims) != 4 {
		t.Fatalf("Claim = %v, %v; want the 4 rows", ids(claims), err)
	}
	token := map[string]string{}
	for _, c := range claims {
		token[c.ID] = c.ClaimToken
		if _, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: c.ID, OrganizationID: b.org,
			ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken}}); err != nil {
			t.Fatal(err)
		}
	}
	record := func(o outbox.Outcome) error {
		got, err := b.store.Record(ctx, []outbox.Outcome{o})
		if err == nil && len(got.IDs) != 1 {
			err = fmt.Errorf("recorded %v", got.IDs)
		}
		return err
	}
	wait := func(id, awaited string) outbox.Outcome {
		return outbox.Outcome{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: token[id],
			Status: outbox.StatusFailed, LastError: "waiting for " + awaited, RetryIn: time.Hour, Uncharged: true, WaitingFor: awaited}
	}
	if err := record(wait(other, stillInFlight)); err != nil {
		t.Fatal(err)
	}

	// The order's record waits, its snapshot taken, on its start row.
	tx, err := b.f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `select 1 from integration_outbox_starts where claim_token = $1 for update`, token[order]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- record(wait(order, push)) }()
	for deadline := time.Now().Add(10 * time.Second); b.f.Count(t,
		`select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`) == 0; {
		select {
		case err := <-done:
			t.Fatalf("the order's record did not wait for its start row: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the order's record never waited for its start row")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := record(outbox.Outcome{OutboxID: push, OrganizationID: b.org, ConnectionID: pushConn, ClaimToken: token[push],
		Status: outbox.StatusCompleted, ProviderReference: "C-1"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := b.f.Row(t, order); r.Status != "failed" || r.RetryInSeconds == nil || *r.RetryInSeconds < 3500 {
		t.Fatalf("after the two records the order = %+v; want it failed, waiting an hour (the race)", r)
	}
	if r := b.f.Row(t, push); r.Status != "completed" {
		t.Fatalf("push = %+v, want completed", r)
	}

	sw, err := b.store.Sweep(ctx, params(10))
	if err != nil {
		t.Fatal(err)
	}
	if !sw.Claimable {
		t.Error("the sweep that made a waiting row due says nothing is claimable")
	}
	r := b.f.Row(t, order)
	if r.Status != "failed" || r.RetryInSeconds == nil || *r.RetryInSeconds > 1 || r.AttemptCount != 0 {
		t.Fatalf("after the sweep the order = %+v; want it due now, no attempt used", r)
	}
	if r := b.f.Row(t, other); r.RetryInSeconds == nil || *r.RetryInSeconds < 3500 {
		t.Errorf("the sweep woke a row whose awaited row is still in flight: %+v", r)
	}
	// Due already: a second sweep writes no version of it.
	version := func() string {
		var xmin string
		if err := b.f.Pool.QueryRow(ctx, `select xmin::text from external_integration_outbox where id = $1`, order).Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		return xmin
	}
	before := version()
	if _, err := b.store.Sweep(ctx, params(10)); err != nil {
		t.Fatal(err)
	}
	if after := version(); after != before {
		t.Errorf("a second sweep wrote the due waiting row again (xmin %s -> %s)", before, after)
	}
	onlyOne, err := b.store.Claim(ctx, params(10))
	if err != nil || len(onlyOne) != 1 || onlyOne[0].ID != order {
		t.Errorf("Claim after the sweep = %v, %v; want the order alone", ids(onlyOne), err)
	}
}
