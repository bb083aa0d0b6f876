package outbox_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

func deadLettered(c outbox.Claim) outbox.DeadLetteredMessage {
	return outbox.DeadLetteredMessage{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
		ClaimToken: c.ClaimToken}
}

// A dead-letter message releases its row only while the row is still that
// message's claim: not started (or started with its lease over), not
// answered by the provider, same token, organization and connection.
func TestReleaseDeadLetteredIsFencedByTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	for i := range 7 {
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
			CreatedAt: base.Add(time.Duration(i) * time.Second)})
	}
	claims, err := b.store.Claim(ctx, params(10))
	if err != nil || len(claims) != 7 {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	unstarted, running, crashed, accepted, foreign, otherConn, staleToken := claims[0], claims[1], claims[2], claims[3], claims[4], claims[5], claims[6]
	// running: started, its lease covers the push. crashed: started, lease over.
	start := func(c outbox.Claim, until time.Time) {
		jobs, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
			ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken, LeaseUntil: until}})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("start %s: %v", c.ID, err)
		}
	}
	start(running, time.Now().Add(time.Minute))
	start(crashed, time.Time{})
	b.f.Pool.Exec(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 second' where id = $1`, crashed.ID)
	b.f.Pool.Exec(ctx, `update external_integration_outbox set provider_status = 'accepted', lease_expires_at = null,
		next_attempt_at = now() + interval '1 hour' where id = $1`, accepted.ID)

	wrongOrg := deadLettered(foreign)
	wrongOrg.OrganizationID = b.f.NewID(t)
	wrongConn := deadLettered(otherConn)
	wrongConn.ConnectionID = b.f.NewID(t)
	stale := deadLettered(staleToken)
	stale.ClaimToken = b.f.NewID(t)
	msgs := []outbox.DeadLetteredMessage{deadLettered(unstarted), deadLettered(running), deadLettered(crashed),
		deadLettered(accepted), wrongOrg, wrongConn, stale, deadLettered(unstarted)}
	before := map[string]testenv.Row{}
	for _, c := range claims {
		before[c.ID] = b.f.Row(t, c.ID)
	}

	got, err := b.store.ReleaseDeadLettered(ctx, msgs, 10)
	if err != nil {
		t.Fatal(err)
	}
	var released []string
	for _, r := range got {
		if r.Status != outbox.StatusFailed {
			t.Errorf("row %s released as %s, want failed", r.ID, r.Status)
		}
		released = append(released, r.ID)
	}
	want := []string{unstarted.ID, crashed.ID}
	sort.Strings(released)
	sort.Strings(want)
	if !equal(released, want) {
		t.Fatalf("released %v, want the unstarted row and the started one whose lease is over %v", released, want)
	}
	for _, c := range []outbox.Claim{unstarted, crashed} {
		r := b.f.Row(t, c.ID)
		if r.Status != "failed" || r.AttemptCount != 1 || r.ClaimToken != nil || r.LeaseExpiresAt != nil ||
			r.RetryInSeconds == nil || *r.RetryInSeconds > 0 || !strings.Contains(*r.LastError, "dead-letter queue") {
			t.Errorf("released row %s: %+v", c.ID, r)
		}
	}
	if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1 and attempt = 1
		and outcome = 'failed' and provider_called and finished_at is not null`, crashed.ID); n != 1 {
		t.Errorf("the started row's release wrote %d history rows saying the provider may have been called", n)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1 and not provider_called`, unstarted.ID); n != 1 {
		t.Errorf("the unstarted row's release wrote %d history rows without a provider call, want 1", n)
	}
	for _, c := range []outbox.Claim{running, accepted, foreign, otherConn, staleToken} {
		if r := b.f.Row(t, c.ID); r.Status != before[c.ID].Status || r.ClaimToken == nil || *r.ClaimToken != c.ClaimToken {
			t.Errorf("row %s changed: %+v (before %+v)", c.ID, r, before[c.ID])
		}
	}
	if n := b.f.Count(t, `select count(*) from external_integration_conflicts`); n != 0 {
		t.Errorf("%d conflicts for rows with attempts left", n)
	}

	// The released rows are due at once: the next claim takes them again.
	again, err := b.store.Claim(ctx, params(10))
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(again); len(got) != 2 {
		t.Errorf("the next claim took %v, want the two released rows", got)
	}
}

// A row whose message reached the dead-letter queue after its last attempt
// goes to dead_letter with its one open conflict, as an expired lease does.
func TestReleaseDeadLetteredWithNoAttemptsLeftDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, AttemptCount: 2})
	claims, err := b.store.Claim(ctx, outbox.ClaimParams{Limit: 1, MaxAttempts: 3, Lease: time.Hour})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	got, err := b.store.ReleaseDeadLettered(ctx, []outbox.DeadLetteredMessage{deadLettered(claims[0])}, 3)
	if err != nil || len(got) != 1 || got[0].Status != outbox.StatusDeadLetter {
		t.Fatalf("release: %v %v, want dead_letter", got, err)
	}
	if r := b.f.Row(t, id); r.Status != "dead_letter" || r.AttemptCount != 3 || r.NextAttemptAt != nil ||
		!strings.Contains(*r.LastError, "attempts exhausted") {
		t.Errorf("row: %+v", r)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and status = 'open'
		and conflict_type = 'provider_rejected' and severity = 'high'`, id); n != 1 {
		t.Errorf("%d open conflicts, want 1", n)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1 and outcome = 'dead_letter'`, id); n != 1 {
		t.Errorf("%d dead_letter attempt rows, want 1", n)
	}
	// Again: nothing, not a second conflict.
	if got, err := b.store.ReleaseDeadLettered(ctx, []outbox.DeadLetteredMessage{deadLettered(claims[0])}, 3); err != nil || len(got) != 0 {
		t.Errorf("repeated release: %v %v", got, err)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1`, id); n != 1 {
		t.Errorf("%d conflicts after a repeated message", n)
	}
}
