package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// entityCommands inserts n commands for one purchase order of org through
// conn, created a second apart from base, oldest first.
func entityCommands(t *testing.T, f *testenv.Fixture, org, conn string, n int, base time.Time) []string {
	t.Helper()
	po := f.PurchaseOrder(t, org, "", 1)
	var out []string
	for i := range n {
		out = append(out, f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po,
			CreatedAt: base.Add(time.Duration(i) * time.Second)}))
	}
	return out
}

// overlappingClaims runs n claims at once and returns every row they took.
func overlappingClaims(t *testing.T, s *outbox.Store, n int, p outbox.ClaimParams) []outbox.Claim {
	t.Helper()
	var (
		mu  sync.Mutex
		all []outbox.Claim
		wg  sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			b, err := s.ClaimBatch(context.Background(), p)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			all = append(all, b.Claims...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

func claimIDs(claims []outbox.Claim) map[string]outbox.Claim {
	out := map[string]outbox.Claim{}
	for _, c := range claims {
		out[c.ID] = c
	}
	return out
}

// Commands of one (connection, entity) go one at a time, oldest first,
// whatever claims overlap; other entities flow meanwhile.
func TestEntityCommandsGoOneAtATimeOldestFirstUnderOverlappingClaims(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	order := entityCommands(t, f, org, conn, 4, base)
	other := entityCommands(t, f, org, conn, 2, base.Add(time.Minute))
	lone := commands(t, f, org, conn, 3, base.Add(2*time.Minute))
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
	for step, want := range order {
		got := claimIDs(overlappingClaims(t, s, 3, p))
		if _, ok := got[want]; !ok || len(got) < 1 {
			t.Fatalf("step %d: claimed %v, want the order's command %d (%s)", step, keys(got), step, want)
		}
		for _, id := range order {
			if _, ok := got[id]; ok && id != want {
				t.Fatalf("step %d: command %s of the same order claimed beside %s", step, id, want)
			}
		}
		if step == 0 {
			if _, ok := got[other[0]]; !ok {
				t.Errorf("the other order's first command was not claimed meanwhile: %v", keys(got))
			}
			if _, ok := got[other[1]]; ok {
				t.Errorf("the other order's second command claimed beside its first")
			}
			for _, id := range lone {
				if _, ok := got[id]; !ok {
					t.Errorf("command %s of an entity of its own was not claimed", id)
				}
			}
		}
		// The command completes: the next one is free at once.
		finish(t, s, []outbox.Claim{got[want]}, outbox.StatusCompleted, "")
	}
}

// A head that failed holds its followers until its retry ends; a head that
// reached dead_letter releases them at once.
func TestFailedHeadHoldsItsFollowersAndADeadLetteredOneReleasesThem(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	ids := entityCommands(t, f, org, conn, 3, base)
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
	head := claimBatch(t, s, p).Claims
	if len(head) != 1 || head[0].ID != ids[0] {
		t.Fatalf("first claim %v, want only the oldest %s", head, ids[0])
	}
	// The head fails; its retry is due in an hour.
	ctx := context.Background()
	if _, err := s.Start(ctx, []outbox.StartRequest{{OutboxID: head[0].ID, OrganizationID: org, ConnectionID: conn,
		ClaimToken: head[0].ClaimToken}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(ctx, []outbox.Outcome{{OutboxID: head[0].ID, OrganizationID: org, ConnectionID: conn,
		ClaimToken: head[0].ClaimToken, Status: outbox.StatusFailed, LastError: "HTTP 503", RetryIn: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 {
		t.Fatalf("claimed %v while the oldest command waits for its retry", b.Claims)
	}
	// Its retry comes due: it goes again, still alone.
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() - interval '1 second' where id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	retry := claimBatch(t, s, p).Claims
	if len(retry) != 1 || retry[0].ID != ids[0] || retry[0].AttemptCount != 2 {
		t.Fatalf("after the retry came due: claimed %v, want the head's second attempt alone", retry)
	}
	// It is rejected for good: the next command is free at once.
	finish(t, s, retry, outbox.StatusDeadLetter, "")
	next := claimBatch(t, s, p).Claims
	if len(next) != 1 || next[0].ID != ids[1] {
		t.Fatalf("after the head reached dead_letter: claimed %v, want the next command %s", next, ids[1])
	}
	// A rerun of the dead-lettered head puts it back ahead of the third
	// one, after the one in flight.
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set status = 'queued', attempt_count = 0 where id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 {
		t.Fatalf("claimed %v while a command of the entity is in flight", b.Claims)
	}
	finish(t, s, next, outbox.StatusCompleted, "")
	if b := claimBatch(t, s, p); len(b.Claims) != 1 || b.Claims[0].ID != ids[0] {
		t.Fatalf("after the rerun: claimed %v, want the rerun oldest command %s ahead of %s", b.Claims, ids[0], ids[2])
	}
}

// An accepted command awaiting its follow-up is in flight: the next waits.
func TestAcceptedHeadHoldsItsFollowersUntilItsFollowUpEnds(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	ids := entityCommands(t, f, org, conn, 2, time.Now().Add(-time.Hour))
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
	head := claimBatch(t, s, p).Claims
	finish(t, s, head, outbox.StatusProcessing, "") // accepted, follow-up in an hour
	if b := claimBatch(t, s, p); len(b.Claims) != 0 {
		t.Fatalf("claimed %v while the oldest command awaits its follow-up", b.Claims)
	}
	if _, err := f.Pool.Exec(context.Background(), `update external_integration_outbox set next_attempt_at = now() - interval '1 second' where id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	follow := claimBatch(t, s, p).Claims
	if len(follow) != 1 || follow[0].ID != ids[0] {
		t.Fatalf("follow-up due: claimed %v, want the accepted head alone", follow)
	}
	finish(t, s, follow, outbox.StatusCompleted, "")
	if b := claimBatch(t, s, p); len(b.Claims) != 1 || b.Claims[0].ID != ids[1] {
		t.Fatalf("after the head completed: %v, want %s", b.Claims, ids[1])
	}
}

// config_json.ordered = false opts a connection out: its commands of one
// entity go concurrently.
func TestUnorderedConnectionClaimsAnEntitysCommandsAtOnce(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"ordered": false}})
	ids := entityCommands(t, f, org, conn, 4, time.Now().Add(-time.Hour))
	b := claimBatch(t, outbox.NewStore(f.Pool), outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute})
	got := claimIDs(b.Claims)
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			t.Errorf("opted out: command %s not claimed; want all 4 of the entity at once (got %d)", id, len(got))
		}
	}
}

func keys(m map[string]outbox.Claim) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A claimed row says whether due commands of its entity wait behind it, and
// a claim told of such rows (ClaimParams.Heads) says whether one is still
// in flight: what lets a dispatch run wait for its own rows. An opted-out
// connection has no followers.
func TestClaimTellsFollowersAndWhetherTheirHeadIsStillInFlight(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	ids := entityCommands(t, f, org, conn, 2, base)
	lone := commands(t, f, org, conn, 1, base.Add(time.Minute))
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}

	b := claimBatch(t, s, p)
	got := claimIDs(b.Claims)
	if len(got) != 2 || !got[ids[0]].Followers || got[lone[0]].Followers || b.HeldBehind {
		t.Fatalf("first claim: %+v (held behind %v), want the head with followers and the lone row without", b.Claims, b.HeldBehind)
	}
	p.Heads = []string{ids[0]}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 || !b.HeldBehind || b.Held {
		t.Errorf("with the head in flight: %+v, held behind %v, held %v; want nothing claimed, held behind only", b.Claims, b.HeldBehind, b.Held)
	}
	finish(t, s, []outbox.Claim{got[ids[0]]}, outbox.StatusCompleted, "")
	b = claimBatch(t, s, p)
	if len(b.Claims) != 1 || b.Claims[0].ID != ids[1] || b.Claims[0].Followers || b.HeldBehind {
		t.Errorf("after the head's result: %+v, held behind %v; want its follower, the last one, and the head no longer in flight", b.Claims, b.HeldBehind)
	}

	free := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"ordered": false}})
	both := entityCommands(t, f, org, free, 2, base.Add(2*time.Minute))
	b = claimBatch(t, s, outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute})
	if got := claimIDs(b.Claims); len(got) != 2 || got[both[0]].Followers || got[both[1]].Followers {
		t.Errorf("opted-out connection: %+v, want both claimed, no followers", b.Claims)
	}
}

// The host's commands due at once are in no index of the per-entity order
// (only the claim's walk index): a claim still keeps their order when the
// walk does not bring the older one (a listed id), and a command the host
// schedules for later holds the newer ones of its entity until it has gone.
// A reclaim waits behind an older due retry the claim does not walk to.
func TestOrderHoldsForRowsOutsideTheEntityOrderIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	ids := entityCommands(t, f, org, conn, 2, base)
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}

	listed := p
	listed.IDs = []string{ids[1]}
	if b := claimBatch(t, s, listed); len(b.Claims) != 0 {
		t.Fatalf("the newer command claimed by its id while the older one waits: %+v", b.Claims)
	}
	listed.IDs = []string{ids[0]}
	if b := claimBatch(t, s, listed); len(b.Claims) != 1 || b.Claims[0].ID != ids[0] {
		t.Fatalf("the older command by its id: %+v, want it", b.Claims)
	}

	// A reclaim of a newer command waits behind an older failed one that is
	// due: the walk would bring that one first, but a claim of listed ids
	// does not walk.
	past := time.Now().Add(-time.Minute)
	po0 := f.PurchaseOrder(t, org, "", 1)
	failed := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po0,
		CreatedAt: base, Status: "failed", AttemptCount: 1, NextAttemptAt: &past})
	expired := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po0,
		CreatedAt: base.Add(time.Second), AttemptCount: 1})
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set status = 'processing', claim_token = gen_random_uuid(),
		lease_expires_at = now() - interval '1 minute', next_attempt_at = null where id = $1`, expired); err != nil {
		t.Fatal(err)
	}
	listed.IDs = []string{expired}
	if b := claimBatch(t, s, listed); len(b.Claims) != 0 {
		t.Fatalf("the newer command's reclaim claimed while the older one waits for its retry: %+v", b.Claims)
	}
	listed.IDs = []string{failed, expired}
	if b := claimBatch(t, s, listed); len(b.Claims) != 1 || b.Claims[0].ID != failed {
		t.Fatalf("both listed: %+v, want only the older %s", b.Claims, failed)
	}

	later := time.Now().Add(time.Hour)
	po := f.PurchaseOrder(t, org, "", 1)
	scheduled := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po,
		CreatedAt: base, NextAttemptAt: &later})
	next := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po,
		CreatedAt: base.Add(time.Second)})
	if b := claimBatch(t, s, p); len(b.Claims) != 0 {
		t.Fatalf("claimed %+v while the entity's older command is scheduled for later", b.Claims)
	}
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() - interval '1 second' where id = $1`, scheduled); err != nil {
		t.Fatal(err)
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 1 || b.Claims[0].ID != scheduled || !b.Claims[0].Followers {
		t.Fatalf("once due: claimed %+v, want the scheduled command alone, with a follower (%s)", b.Claims, next)
	}
}

// accept marks commands as the provider accepted them (the old worker's
// pushes, say): processing with a provider status, no lease, the
// follow-up due.
func accept(t *testing.T, f *testenv.Fixture, ids ...string) {
	t.Helper()
	if _, err := f.Pool.Exec(context.Background(), `update external_integration_outbox
		set status = 'processing', provider_status = 'accepted', lease_expires_at = null,
			next_attempt_at = now() - interval '1 second', attempt_count = 1
		where id = any($1::text[]::uuid[])`, ids); err != nil {
		t.Fatal(err)
	}
}

// claimInTurn claims one command after the other, each alone, and
// completes it.
func claimInTurn(t *testing.T, s *outbox.Store, p outbox.ClaimParams, want ...string) {
	t.Helper()
	for step, id := range want {
		b := claimBatch(t, s, p)
		if len(b.Claims) != 1 || b.Claims[0].ID != id {
			t.Fatalf("step %d: claimed %+v, want %s alone", step, b.Claims, id)
		}
		finish(t, s, b.Claims, outbox.StatusCompleted, "")
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 {
		t.Fatalf("claimed %+v after every command ended", b.Claims)
	}
}

// Two accepted commands of one entity (the old worker pushed an order twice
// and got a 202 both times) do not hold each other: the older is followed
// up first, then the newer, then the entity's commands queued behind them.
func TestTwoAcceptedCommandsOfOneEntityAreFollowedUpOldestFirst(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	ids := entityCommands(t, f, org, conn, 3, time.Now().Add(-time.Hour))
	accept(t, f, ids[0], ids[1])
	claimInTurn(t, outbox.NewStore(f.Pool), outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}, ids...)
}

// A connection that kept no order while two commands of one entity were
// accepted, and keeps it again: their follow-ups go oldest first, one at a
// time, then the entity's queued command.
func TestAcceptedCommandsOfAConnectionOrderedAgainAreFollowedUpOldestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"ordered": false}})
	base := time.Now().Add(-time.Hour)
	po := f.PurchaseOrder(t, org, "", 1)
	var ids []string
	for i := range 2 {
		ids = append(ids, f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po,
			CreatedAt: base.Add(time.Duration(i) * time.Second)}))
	}
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
	both := claimBatch(t, s, p).Claims
	if len(both) != 2 {
		t.Fatalf("unordered: claimed %+v, want both commands of the entity", both)
	}
	finish(t, s, both, outbox.StatusProcessing, "") // accepted, follow-up in an hour
	ids = append(ids, f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po,
		CreatedAt: base.Add(2 * time.Second)}))
	if _, err := f.Pool.Exec(ctx, `update integration_connections set config_json = config_json - 'ordered' where id = $1`, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() - interval '1 second'
		where id = any($1::text[]::uuid[])`, ids[:2]); err != nil {
		t.Fatal(err)
	}
	claimInTurn(t, s, p, ids...)
}

// An older command whose lease expired and a newer accepted one of the same
// entity do not hold each other either: both go, one at a time.
func TestExpiredOlderCommandAndNewerAcceptedOneGoOneAtATime(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	ids := entityCommands(t, f, org, conn, 2, time.Now().Add(-time.Hour))
	if _, err := f.Pool.Exec(context.Background(), `update external_integration_outbox set status = 'processing',
		claim_token = gen_random_uuid(), lease_expires_at = now() - interval '1 minute', attempt_count = 1
		where id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	accept(t, f, ids[1])
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
	seen := map[string]bool{}
	for step := range 2 {
		b := claimBatch(t, s, p)
		if len(b.Claims) != 1 || seen[b.Claims[0].ID] {
			t.Fatalf("step %d: claimed %+v, want one command of the entity not claimed yet", step, b.Claims)
		}
		seen[b.Claims[0].ID] = true
		finish(t, s, b.Claims, outbox.StatusCompleted, "")
	}
}
