package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// start claims the row (alone due) and starts it; it returns the job.
func startOne(t *testing.T, b bundle, id string, lease time.Duration) outbox.Job {
	t.Helper()
	ctx := context.Background()
	p := params(1)
	p.Lease = lease
	claims, err := b.store.Claim(ctx, p)
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatalf("claim = %+v, %v", claims, err)
	}
	jobs, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn,
		ClaimToken: claims[0].ClaimToken}})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("start = %+v, %v", jobs, err)
	}
	return jobs[0]
}

// TestEveryUnknownOutcomeReachesTheNextAttempt: the job the push gets
// says when the row's first attempt of unknown outcome started, from each
// way such an attempt is left: a result recorded as outcome unknown; a
// push that crashed after its start (its start, until the sweep turns it
// into a lease_expired history row, which still says it); a message that
// reached the dead-letter queue after its push started. A known outcome
// says nothing, and a rerun since is told.
func TestEveryUnknownOutcomeReachesTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("recorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
		j := startOne(t, b, id, time.Minute)
		if !j.UnknownSince.IsZero() || j.Rerun {
			t.Fatalf("a first attempt: unknown since %v, rerun %v", j.UnknownSince, j.Rerun)
		}
		// A known failure (a 400 would dead-letter; a 503 answered is
		// unknown, a 429 known): first a known one.
		began := time.Now().Add(-time.Second).Truncate(time.Microsecond)
		o := outbox.Outcome{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: j.ClaimToken,
			Status: outbox.StatusFailed, LastError: "xero answered 429", ProviderCalled: true, HTTPStatus: 429,
			CallStartedAt: began, CallFinishedAt: began.Add(time.Millisecond)}
		if _, err := b.store.Record(ctx, []outbox.Outcome{o}); err != nil {
			t.Fatal(err)
		}
		b.f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() where id = $1`, id)
		j = startOne(t, b, id, time.Minute)
		if !j.UnknownSince.IsZero() {
			t.Fatalf("after a known failure: unknown since %v", j.UnknownSince)
		}
		o.ClaimToken, o.LastError, o.HTTPStatus, o.OutcomeUnknown = j.ClaimToken, "xero answered 503", 503, true
		if _, err := b.store.Record(ctx, []outbox.Outcome{o}); err != nil {
			t.Fatal(err)
		}
		b.f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() where id = $1`, id)
		j = startOne(t, b, id, time.Minute)
		if !j.UnknownSince.Equal(began) || j.Rerun {
			t.Errorf("after an unknown outcome: since %v (want %v), rerun %v", j.UnknownSince, began, j.Rerun)
		}
		// The peek (the preview's read) says the same.
		pk, err := outbox.Peek(ctx, b.f.Pool, b.org, id)
		if err != nil || !pk.UnknownSince.Equal(began) {
			t.Errorf("peek: since %v, %v", pk.UnknownSince, err)
		}
		// A rerun after it (its audit row) is told.
		b.f.Pool.Exec(ctx, `insert into external_integration_rerun_audit (organization_id, reason, payload, affected_ids)
			values ($1, 'test', '{}', array[$2::uuid])`, b.org, id)
		if pk, _ := outbox.Peek(ctx, b.f.Pool, b.org, id); !pk.Rerun {
			t.Error("a rerun after the unknown attempt is not told")
		}
	})

	t.Run("crashed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
		startOne(t, b, id, time.Minute)
		var started time.Time
		if err := b.f.Pool.QueryRow(ctx, `select started_at from integration_outbox_starts where outbox_id = $1`, id).Scan(&started); err != nil {
			t.Fatal(err)
		}
		// The push crashed: no record; its lease runs out.
		b.f.Pool.Exec(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 second' where id = $1`, id)
		j := startOne(t, b, id, time.Minute)
		if !j.UnknownSince.Equal(started) || j.AttemptCount != 2 {
			t.Fatalf("reclaimed after a crash: since %v (want %v), attempt %d", j.UnknownSince, started, j.AttemptCount)
		}
		// That attempt crashes too; ten minutes on, the sweep turns the
		// two starts into history rows, and the next attempt still knows.
		b.f.Pool.Exec(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 second' where id = $1`, id)
		b.f.Pool.Exec(ctx, `update integration_outbox_starts set created_at = created_at - interval '11 minutes' where outbox_id = $1`, id)
		startOne(t, b, id, time.Minute)
		if _, err := b.store.DeadLetterExpired(ctx, outbox.ClaimParams{MaxAttempts: 10}); err != nil {
			t.Fatal(err)
		}
		if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1 and outcome = 'lease_expired'
			and outcome_unknown and provider_called and attempt in (1, 2)`, id); n != 2 {
			t.Errorf("%d lease_expired history rows, want 2 (attempts 1 and 2)", n)
		}
		if n := b.f.Count(t, `select count(*) from integration_outbox_starts where outbox_id = $1`, id); n != 1 {
			t.Errorf("%d starts left, want the current one", n)
		}
		pk, err := outbox.Peek(ctx, b.f.Pool, b.org, id)
		if err != nil || !pk.UnknownSince.Equal(started) {
			t.Errorf("after the sweep: since %v (want %v), %v", pk.UnknownSince, started, err)
		}
	})

	t.Run("dead-lettered message", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
		j := startOne(t, b, id, time.Minute)
		b.f.Pool.Exec(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 second' where id = $1`, id)
		rel, err := b.store.ReleaseDeadLettered(ctx, []outbox.DeadLetteredMessage{{OutboxID: id, OrganizationID: b.org,
			ConnectionID: b.conn, ClaimToken: j.ClaimToken}}, 10)
		if err != nil || len(rel) != 1 {
			t.Fatalf("release = %+v, %v", rel, err)
		}
		if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1 and outcome_unknown`, id); n != 1 {
			t.Errorf("%d unknown history rows, want 1", n)
		}
		if n := b.f.Count(t, `select count(*) from integration_outbox_starts where outbox_id = $1`, id); n != 0 {
			t.Errorf("the released claim's start is left (%d): the sweep would count it twice", n)
		}
		if j := startOne(t, b, id, time.Minute); j.UnknownSince.IsZero() {
			t.Error("the next attempt does not know")
		}
	})
}

// TestAFirstAttemptReadsNoHistory: the start of first attempts, in the
// generic plan its routine runs (plan_cache_mode force_generic_plan), never
// reads the attempt history or the starts, however large they are: the
// probes for an earlier unknown outcome are gated on the row having been
// tried (a second attempt, a last_error). Ungated, a generic plan made while
// the history was small read all of it for every job (5 ms a start in the
// pooler bench).
func TestAFirstAttemptReadsNoHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.f.Pool.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, created_at)
		select $1, $2, 'sandbox', 'push_purchase_order', 'purchase_order', $3, '{}', 'k'||g, 'completed', 1, now() - make_interval(secs => g)
		from generate_series(1, 5000) g`, b.org, b.conn, b.po)
	b.f.Pool.Exec(ctx, `insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at, outcome,
			provider_called, outcome_unknown)
		select id, organization_id, 1, now(), now(), 'failed', true, true from external_integration_outbox`)
	b.f.Pool.Exec(ctx, `insert into integration_outbox_starts (claim_token, outbox_id, organization_id, started_at)
		select gen_random_uuid(), id, organization_id, now() from external_integration_outbox`)
	for range 10 {
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	}
	claims, err := b.store.Claim(ctx, params(10))
	if err != nil || len(claims) != 10 {
		t.Fatalf("claim = %d, %v", len(claims), err)
	}
	var reqs []outbox.StartRequest
	for _, c := range claims {
		reqs = append(reqs, outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
			ClaimToken: c.ClaimToken})
	}
	tx, err := b.f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	plan, err := b.store.StartPlan(ctx, tx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(plan, "\n") {
		if (strings.Contains(line, "on external_integration_attempts") || strings.Contains(line, "on integration_outbox_starts st")) &&
			!strings.Contains(line, "never executed") {
			t.Errorf("a first attempt's start reads the history:\n%s\n\n%s", line, plan)
		}
	}
	if !strings.Contains(plan, "external_integration_attempts") {
		t.Fatalf("the plan has no probe of the history at all:\n%s", plan)
	}
}
