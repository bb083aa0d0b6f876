package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// waitingEntriesReadBy is how many entries of the waiting index the step
// (the CTE named cte) of the statements whose text holds marker read in
// plans (returned or dropped by a filter, over every loop of every scan of
// that index under the step, as auto_explain reports it), and how many such
// statements there were.
func waitingEntriesReadBy(plans []plannedStatement, marker, cte string) (statements int, waiting float64) {
	count := func(node map[string]any) {
		if node["Index Name"] == "external_integration_outbox_waiting_idx" {
			rows, _ := node["Actual Rows"].(float64)
			removed, _ := node["Rows Removed by Filter"].(float64)
			loops, _ := node["Actual Loops"].(float64)
			waiting += (rows + removed) * loops
		}
	}
	for _, p := range plans {
		if strings.Contains(p.Query, marker) {
			statements++
			// Only the nodes under the step.
			walkPlan(p.Plan, func(node map[string]any) {
				if node["Subplan Name"] == "CTE "+cte {
					walkPlan(node, count)
				}
			})
		}
	}
	return statements, waiting
}

// Ending rows reads only their own waiters from the waiting index, however
// many rows wait for others: the record of a push batch (record.sql's woken
// step) and the dispatch run's sweep (dead_letter_expired.sql's woken step)
// find the rows waiting for each row they end by a probe of the waiting
// index per ended row. On the shape of TestAClaimReadsNoParkedFollower (40k
// rows, 2,000 queued commands of one purchase order parked behind its
// accepted head, the statistics of before the parking) the record of 10
// completed rows of other purchase orders, and the sweep that ends 10 rows
// of others whose lease expired, read as many entries of the waiting index
// as on the same load without the parked followers (none). As a join, the
// plan read the whole waiting index at every record and every sweep that
// ended a row (a hash of it, or the outer side of the join), where the
// statistics said that no row waits: 10,000 parked rows cost every record
// about 70 ms.
func TestEndingRowsReadsNoParkedFollowerOfOthers(t *testing.T) {
	t.Parallel()
	const rows, followers, batch = 40_000, 2_000, 10
	ctx := context.Background()
	for _, parked := range []int{0, followers} {
		f := parkedFollowersDB(t, rows, parked)
		s := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
		// The oldest due rows of other purchase orders, claimed and started.
		q, err := f.Pool.Query(ctx, `select id::text from external_integration_outbox
			where status = 'queued' and local_entity_id <> $1 order by created_at limit $2`, followedOrder, batch)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(q, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		claims, err := s.Claim(ctx, outbox.ClaimParams{Limit: batch, MaxAttempts: 10, Lease: 15 * time.Minute, IDs: ids})
		if err != nil || len(claims) != batch {
			t.Fatalf("claimed %d of %d rows: %v", len(claims), batch, err)
		}
		var reqs []outbox.StartRequest
		var outs []outbox.Outcome
		for _, c := range claims {
			reqs = append(reqs, outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID,
				ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken})
			outs = append(outs, outbox.Outcome{OutboxID: c.ID, OrganizationID: c.OrganizationID,
				ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken, Status: outbox.StatusCompleted,
				Circuit: outbox.CircuitSuccess})
		}
		if jobs, err := s.Start(ctx, reqs); err != nil || len(jobs) != batch {
			t.Fatalf("started %d of %d jobs: %v", len(jobs), batch, err)
		}

		// run runs step in a transaction rolled back, on a new connection
		// that reports its plans (its routine's first plan, a custom one, or
		// with generic the generic plan), and returns the entries of the
		// waiting index read by the woken step of the statement whose text
		// holds marker.
		run := func(marker string, generic bool, step func(tx pgx.Tx, s *outbox.Store)) float64 {
			t.Helper()
			rec := &planRecorder{}
			tx, err := ourPool(t, f, rec).Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if generic {
				if _, err := tx.Exec(ctx, "set local plan_cache_mode = force_generic_plan"); err != nil {
					t.Fatal(err)
				}
			}
			step(tx, outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute}))
			plans, errs := rec.take()
			statements, waiting := waitingEntriesReadBy(plans, marker, "woken")
			if statements != 1 || len(errs) != 0 {
				t.Fatalf("auto_explain reported %d statements holding %q (want 1); errors %v", statements, marker, errs)
			}
			return waiting
		}
		for _, generic := range []bool{false, true} {
			recorded := run("jsonb_to_recordset(", generic, func(_ pgx.Tx, s *outbox.Store) {
				if r, err := s.Record(ctx, outs); err != nil || len(r.IDs) != batch {
					t.Fatalf("recorded %d of %d results: %v", len(r.IDs), batch, err)
				}
			})
			swept := run("), unparked as (", generic, func(tx pgx.Tx, s *outbox.Store) {
				// Their leases expired with no attempt left (MaxAttempts 1).
				if _, err := tx.Exec(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 minute'
					where id = any($1::text[]::uuid[])`, ids); err != nil {
					t.Fatal(err)
				}
				if sw, err := s.Sweep(ctx, outbox.ClaimParams{MaxAttempts: 1}); err != nil || sw.DeadLettered != batch {
					t.Fatalf("the sweep ended %d rows (want %d): %v", sw.DeadLettered, batch, err)
				}
			})
			t.Logf("with %d followers parked (generic plan %v), entries of the waiting index read by the woken step of the record of %d rows: %v, of the sweep ending %d: %v",
				parked, generic, batch, recorded, batch, swept)
			if recorded > 0 || swept > 0 {
				t.Errorf("with %d followers parked (generic plan %v), ending %d rows none waits for read %v entries of the waiting index in the record, %v in the sweep (want none)",
					parked, generic, batch, recorded, swept)
			}
		}
	}
}

// Every row waiting for a row that ends is woken, however many wait for it,
// by the record of its end and by the sweep that ends it: the queued
// (parked) one leaves its chain, the failed ones keep the name of the row
// they waited for; a row waiting for it that is not queued or failed, of
// another organization, or recorded in the same batch, is left alone.
func TestEveryRowWaitingForAnEndedRowWakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	other := b.f.NewID(t)
	otherConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: other, Config: map[string]any{"ordered": false}})
	// waiters makes rows waiting for awaited: three failed ones and a queued
	// one that wake, and a processing one and one of another organization
	// that do not.
	waiters := func(awaited string) (wake, stay []string) {
		t.Helper()
		for _, o := range []testenv.CommandOpts{
			{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, Status: "failed", NextAttemptAt: &later},
			{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, Status: "failed", NextAttemptAt: &later},
			{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, Status: "failed", NextAttemptAt: &later},
			{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, NextAttemptAt: &later},
			{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, Status: "processing", NextAttemptAt: &later},
			{OrganizationID: other, ConnectionID: otherConn, EntityID: b.f.NewID(t), Status: "failed", NextAttemptAt: &later},
		} {
			id := b.f.Command(t, o)
			if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set waiting_for_outbox_id = $1 where id = $2`, awaited, id); err != nil {
				t.Fatal(err)
			}
			if o.Status == "processing" || o.OrganizationID == other {
				stay = append(stay, id)
			} else {
				wake = append(wake, id)
			}
		}
		return wake, stay
	}
	check := func(by, awaited string, wake, stay []string) {
		t.Helper()
		for _, id := range wake {
			var due bool
			var w *string
			var status string
			if err := b.f.Pool.QueryRow(ctx, `select next_attempt_at <= now(), waiting_for_outbox_id::text, status::text
				from external_integration_outbox where id = $1`, id).Scan(&due, &w, &status); err != nil {
				t.Fatal(err)
			}
			if wantW := status == "failed"; !due || (w != nil) != wantW || (w != nil && *w != awaited) {
				t.Errorf("%s: the %s row %s waiting for the ended row: due %v, waiting for %v; want due, waiting for it only if failed",
					by, status, id, due, w)
			}
		}
		for _, id := range stay {
			var due bool
			if err := b.f.Pool.QueryRow(ctx, `select next_attempt_at <= now() from external_integration_outbox where id = $1`, id).Scan(&due); err != nil {
				t.Fatal(err)
			}
			if due {
				t.Errorf("%s: row %s woken (a processing row or another organization's)", by, id)
			}
		}
	}

	// The record of an end: the awaited row and one of its waiters recorded
	// in one batch (that waiter is recorded, not woken).
	awaited := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, CommandType: "push_supplier",
		EntityID: b.f.NewID(t), Payload: map[string]any{"name": "S"}, CreatedAt: time.Now().Add(-time.Minute)})
	inBatch := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
		CreatedAt: time.Now().Add(-time.Minute)})
	claims, err := b.store.Claim(ctx, params(10))
	if err != nil || len(claims) != 2 {
		t.Fatalf("claimed %v: %v; want the awaited row and one waiter", ids(claims), err)
	}
	wake, stay := waiters(awaited)
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set waiting_for_outbox_id = $1 where id = $2`, awaited, inBatch); err != nil {
		t.Fatal(err)
	}
	finish(t, b.store, claims, outbox.StatusCompleted, "")
	check("record", awaited, wake, stay)
	if r := b.f.Row(t, inBatch); r.Status != "completed" {
		t.Errorf("the waiter recorded beside the awaited row = %+v; want completed", r)
	}

	// The sweep's end of an exhausted row.
	exhausted := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, CommandType: "push_supplier",
		EntityID: b.f.NewID(t), Payload: map[string]any{"name": "S"}, Status: "failed", AttemptCount: 10})
	wake, stay = waiters(exhausted)
	if n, err := b.store.DeadLetterExpired(ctx, params(10)); err != nil || n != 1 {
		t.Fatalf("DeadLetterExpired = %d, %v; want the exhausted row", n, err)
	}
	check("sweep", exhausted, wake, stay)
}
