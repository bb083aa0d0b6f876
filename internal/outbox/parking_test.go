package outbox_test

import (
	"context"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// parkedState reads, for each id, what it waits for while parked (queued,
// waiting_for_outbox_id set); "" when it is not parked.
func parkedState(t *testing.T, f *testenv.Fixture, ids []string) map[string]string {
	t.Helper()
	rows, err := f.Pool.Query(context.Background(), `
		select id::text, coalesce(waiting_for_outbox_id::text, '')
		from external_integration_outbox
		where id = any($1::uuid[]) and status = 'queued'`, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, waits string
		if err := rows.Scan(&id, &waits); err != nil {
			t.Fatal(err)
		}
		out[id] = waits
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// onlyClaim claims once and requires exactly want to be taken.
func onlyClaim(t *testing.T, s *outbox.Store, p outbox.ClaimParams, step string, want string) outbox.Claim {
	t.Helper()
	got := claimBatch(t, s, p).Claims
	if len(got) != 1 || got[0].ID != want {
		var ids []string
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		t.Fatalf("%s: claimed %v, want only %s", step, ids, want)
	}
	return got[0]
}

// busyEntity is a database with n commands of one purchase order of an
// organization, a second apart from an hour ago, oldest first, and a store
// and claim parameters (claims of up to 10 rows) for it.
func busyEntity(t *testing.T, n int) (*testenv.Fixture, []string, *outbox.Store, outbox.ClaimParams) {
	t.Helper()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	order := entityCommands(t, f, org, conn, n, time.Now().Add(-time.Hour))
	return f, order, outbox.NewStore(f.Pool), outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
}

// The due commands a busy entity holds back are parked by the claim that
// meets them: each names the one before it (the first, the command in
// flight), and they leave the claim's walk; each end makes the next one due,
// so the entity's commands still go one at a time, oldest first, and a
// claimed command with parked followers says so (Followers), so the dispatch
// run waits for it.
func TestFollowersBehindABusyEntityAreParkedInAChainAndGoOldestFirst(t *testing.T) {
	t.Parallel()
	f, order, s, p := busyEntity(t, 6)

	head := onlyClaim(t, s, p, "first claim", order[0])
	if !head.Followers {
		t.Error("the head was claimed without its followers said")
	}
	// The next claim meets the followers held behind the head: it parks them.
	if got := claimBatch(t, s, p).Claims; len(got) != 0 {
		t.Fatalf("a follower was claimed while its head is in flight: %v", got)
	}
	parked := parkedState(t, f, order[1:])
	for i, id := range order[1:] {
		if want := order[i]; parked[id] != want {
			t.Errorf("follower %d waits for %q, want the command before it %s", i+1, parked[id], want)
		}
	}
	// A claim with every follower parked takes nothing and parks nothing more.
	if got := claimBatch(t, s, p).Claims; len(got) != 0 {
		t.Fatalf("a parked follower was claimed: %v", got)
	}
	prev := head
	for i, id := range order[1:] {
		finish(t, s, []outbox.Claim{prev}, outbox.StatusCompleted, "")
		if w := parkedState(t, f, []string{id})[id]; w != "" {
			t.Fatalf("follower %d still parked (waiting for %s) after the end of the one before it", i+1, w)
		}
		prev = onlyClaim(t, s, p, "after the end of the one before it", id)
		if wantFollowers := i+2 < len(order); prev.Followers != wantFollowers {
			t.Errorf("follower %d claimed with Followers %v, want %v", i+1, prev.Followers, wantFollowers)
		}
		if got := claimBatch(t, s, p).Claims; len(got) != 0 {
			t.Fatalf("a command claimed beside follower %d of its entity: %v", i+1, got)
		}
	}
}

// A command of a parked entity that comes late (committed after newer ones
// were parked, its created_at older than theirs) is parked behind the newest
// older one, and goes before the newer ones.
func TestALateCommandOfAParkedEntityGoesBeforeTheNewerParkedOnes(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	po := f.PurchaseOrder(t, org, "", 1)
	command := func(at time.Duration) string {
		return f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po, CreatedAt: base.Add(at)})
	}
	h, f1, f2, f3 := command(0), command(10*time.Second), command(20*time.Second), command(30*time.Second)
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: time.Minute}
	head := onlyClaim(t, s, p, "first claim", h)
	if got := claimBatch(t, s, p).Claims; len(got) != 0 {
		t.Fatalf("a follower was claimed while its head is in flight: %v", got)
	}
	late := command(15 * time.Second)
	if got := claimBatch(t, s, p).Claims; len(got) != 0 {
		t.Fatalf("the late command was claimed while its entity is busy: %v", got)
	}
	if w := parkedState(t, f, []string{late})[late]; w != f1 {
		t.Fatalf("the late command waits for %q, want the newest older command %s", w, f1)
	}
	prev := head
	for _, want := range []string{f1, late, f2, f3} {
		finish(t, s, []outbox.Claim{prev}, outbox.StatusCompleted, "")
		prev = onlyClaim(t, s, p, "in created_at order", want)
	}
}

// A parked follower whose awaited command is gone without waking it (the
// host deleted it) is due again after the dispatch run's sweep.
func TestTheSweepWakesAFollowerParkedBehindACommandThatIsGone(t *testing.T) {
	t.Parallel()
	f, order, s, p := busyEntity(t, 3)
	onlyClaim(t, s, p, "first claim", order[0])
	claimBatch(t, s, p)
	if w := parkedState(t, f, []string{order[1]})[order[1]]; w != order[0] {
		t.Fatalf("follower 1 waits for %q, want %s", w, order[0])
	}
	ctx := context.Background()
	if _, err := f.Pool.Exec(ctx, `delete from external_integration_outbox where id = $1`, order[0]); err != nil {
		t.Fatal(err)
	}
	if got := claimBatch(t, s, p).Claims; len(got) != 0 {
		t.Fatalf("a parked follower was claimed before the sweep: %v", got)
	}
	sw, err := s.Sweep(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !sw.Claimable {
		t.Error("the sweep that woke a follower says nothing is claimable")
	}
	if w := parkedState(t, f, []string{order[1]})[order[1]]; w != "" {
		t.Fatalf("follower 1 still parked behind %s after the sweep", w)
	}
	if w := parkedState(t, f, []string{order[2]})[order[2]]; w != order[1] {
		t.Errorf("follower 2 waits for %q after the sweep, want follower 1 %s", w, order[1])
	}
	onlyClaim(t, s, p, "after the sweep", order[1])
}
