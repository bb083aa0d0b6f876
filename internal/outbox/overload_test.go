package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// claimAll claims with p and fails the test on error.
func claimBatch(t *testing.T, s *outbox.Store, p outbox.ClaimParams) outbox.Batch {
	t.Helper()
	b, err := s.ClaimBatch(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// commands inserts n due rows of org through conn, created one second apart
// from base, each for a purchase order of its own (per-entity order does
// not hold them back).
func commands(t *testing.T, f *testenv.Fixture, org, conn string, n int, base time.Time) []string {
	t.Helper()
	var out []string
	for i := range n {
		po := f.PurchaseOrder(t, org, "", 1)
		out = append(out, f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po,
			CreatedAt: base.Add(time.Duration(i) * time.Second)}))
	}
	return out
}

func countBy(claims []outbox.Claim, key func(outbox.Claim) string) map[string]int {
	out := map[string]int{}
	for _, c := range claims {
		out[key(c)]++
	}
	return out
}

func byOrg(c outbox.Claim) string  { return c.OrganizationID }
func byConn(c outbox.Claim) string { return c.ConnectionID }

func TestClaimGivesEveryOrganizationATurnBeforeAnySecondOneOldestFirst(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	base := time.Now().Add(-time.Hour)
	big := f.NewID(t)
	bigRows := commands(t, f, big, f.Connection(t, testenv.ConnectionOpts{OrganizationID: big}), 40, base)
	// Three small tenants whose rows are all newer than the big backlog.
	var small []string
	smallRows := map[string][]string{}
	for i := range 3 {
		org := f.NewID(t)
		small = append(small, org)
		smallRows[org] = commands(t, f, org, f.Connection(t, testenv.ConnectionOpts{OrganizationID: org}), 2,
			base.Add(time.Duration(10+i)*time.Minute))
	}

	b := claimBatch(t, s, outbox.ClaimParams{Limit: 6, MaxAttempts: 10, Lease: time.Minute})
	if len(b.Claims) != 6 {
		t.Fatalf("claimed %d rows, want 6", len(b.Claims))
	}
	got := countBy(b.Claims, byOrg)
	for _, org := range small {
		if got[org] < 1 {
			t.Errorf("small organization %s got no turn in the first claim beside a 40-row backlog: %v", org, got)
		}
	}
	// 4 organizations, 6 rows: everyone once, then two second turns; never a
	// third turn before everyone had a second.
	for org, n := range got {
		if n > 2 {
			t.Errorf("organization %s got %d rows while others had at most 2", org, n)
		}
	}
	// Oldest first within each organization.
	claimed := map[string]bool{}
	for _, c := range b.Claims {
		claimed[c.ID] = true
	}
	if !claimed[bigRows[0]] {
		t.Errorf("the big tenant's oldest row was not its first claimed")
	}
	for _, org := range small {
		if !claimed[smallRows[org][0]] {
			t.Errorf("organization %s: its oldest row was not claimed first", org)
		}
	}
}

func TestClaimRotatesThroughMoreOrganizationsThanABatchHolds(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	base := time.Now().Add(-time.Hour)
	const orgs = 7
	for range orgs {
		org := f.NewID(t)
		commands(t, f, org, f.Connection(t, testenv.ConnectionOpts{OrganizationID: org}), 3, base)
	}
	p := outbox.ClaimParams{Limit: 3, MaxAttempts: 10, Lease: time.Minute, After: f.NewID(t)}
	var all []outbox.Claim
	for range 3 {
		b := claimBatch(t, s, p)
		if len(b.Claims) != 3 {
			t.Fatalf("claimed %d rows, want 3", len(b.Claims))
		}
		// Each claim of 3 among 7 waiting organizations serves 3 different ones.
		for org, n := range countBy(b.Claims, byOrg) {
			if n != 1 {
				t.Errorf("one claim gave organization %s %d rows while others waited", org, n)
			}
		}
		all = append(all, b.Claims...)
		p.After = b.NextAfter(p.After)
	}
	got := countBy(all, byOrg)
	if len(got) != orgs {
		t.Errorf("after 9 claimed rows %d of %d organizations had a turn: %v", len(got), orgs, got)
	}
	for org, n := range got {
		if n > 2 {
			t.Errorf("organization %s got %d rows in 9 among 7 organizations", org, n)
		}
	}
}

// finish starts and completes claims, freeing their room.
func finish(t *testing.T, s *outbox.Store, claims []outbox.Claim, status outbox.Status, circuit string) outbox.Recorded {
	t.Helper()
	ctx := context.Background()
	var reqs []outbox.StartRequest
	for _, c := range claims {
		reqs = append(reqs, outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID,
			ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken})
	}
	jobs, err := s.Start(ctx, reqs)
	if err != nil || len(jobs) != len(claims) {
		t.Fatalf("started %d of %d jobs: %v", len(jobs), len(claims), err)
	}
	var outs []outbox.Outcome
	for _, c := range claims {
		o := outbox.Outcome{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
			ClaimToken: c.ClaimToken, Status: status, Circuit: circuit}
		switch status {
		case outbox.StatusFailed:
			o.LastError = "provider answered 503"
			o.RetryIn = -time.Second // due again at once
		case outbox.StatusProcessing: // accepted: followed up in an hour
			o.ProviderStatus, o.RetryIn = "accepted", time.Hour
		case outbox.StatusDeadLetter:
			o.LastError, o.ConflictType, o.ConflictSummary = "HTTP 400", outbox.ConflictProviderRejected, "rejected"
		}
		outs = append(outs, o)
	}
	r, err := s.Record(ctx, outs)
	if err != nil || len(r.IDs) != len(claims) {
		t.Fatalf("recorded %d of %d results: %v", len(r.IDs), len(claims), err)
	}
	return r
}

func TestClaimNeverLeasesMoreThanDispatchMaxInFlight(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	base := time.Now().Add(-time.Hour)
	for range 4 {
		org := f.NewID(t)
		commands(t, f, org, f.Connection(t, testenv.ConnectionOpts{OrganizationID: org}), 5, base)
	}
	p := outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute, MaxInFlight: 8}
	first := claimBatch(t, s, p)
	if len(first.Claims) != 8 || !first.Held {
		t.Fatalf("first claim: %d rows (held %v), want the cap of 8 and held", len(first.Claims), first.Held)
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 || !b.Held {
		t.Fatalf("claim at the cap took %d rows (held %v), want 0 and held", len(b.Claims), b.Held)
	}
	finish(t, s, first.Claims[:3], outbox.StatusCompleted, outbox.CircuitSuccess)
	if b := claimBatch(t, s, p); len(b.Claims) != 3 {
		t.Fatalf("after 3 finished the claim took %d rows, want 3 (cap minus in flight)", len(b.Claims))
	}
	// An expired lease is no longer in flight: its room is claimable again.
	if _, err := f.Pool.Exec(context.Background(), `update external_integration_outbox
		set lease_expires_at = now() - interval '1 second' where id = $1`, first.Claims[3].ID); err != nil {
		t.Fatal(err)
	}
	b := claimBatch(t, s, p)
	if len(b.Claims) != 1 {
		t.Fatalf("after one lease expired the claim took %d rows, want 1", len(b.Claims))
	}
	if n := f.Count(t, `select count(*) from external_integration_outbox
		where status = 'processing' and provider_status is null and lease_expires_at > now()`); n != 8 {
		t.Errorf("%d rows leased, want the cap of 8", n)
	}
}

func TestClaimNeverLeasesMoreThanAConnectionsLimit(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	plain := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	one := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"maxInFlight": 1}})
	wide := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"maxInFlight": 6}})
	junk := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"maxInFlight": "lots"}})
	for _, c := range []string{plain, one, wide, junk} {
		commands(t, f, org, c, 8, base)
	}
	p := outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute, ConnectionMaxInFlight: 3}
	b := claimBatch(t, s, p)
	got := countBy(b.Claims, byConn)
	want := map[string]int{plain: 3, one: 1, wide: 6, junk: 3}
	for c, n := range want {
		if got[c] != n {
			t.Errorf("connection %s: %d rows leased, want %d (%v)", c, got[c], n, got)
		}
	}
	if !b.Held {
		t.Errorf("due rows held back by the connection limits, but the batch says not held")
	}
	// Full connections take nothing more until a row finishes.
	if b2 := claimBatch(t, s, p); len(b2.Claims) != 0 {
		t.Fatalf("claim with every connection full took %d rows", len(b2.Claims))
	}
	var ofOne []outbox.Claim
	for _, c := range b.Claims {
		if c.ConnectionID == one {
			ofOne = append(ofOne, c)
		}
	}
	finish(t, s, ofOne, outbox.StatusCompleted, outbox.CircuitSuccess)
	b3 := claimBatch(t, s, p)
	if len(b3.Claims) != 1 || b3.Claims[0].ConnectionID != one {
		t.Fatalf("after the 1-limit connection finished its row the claim took %v, want one row of it", countBy(b3.Claims, byConn))
	}
	// Without the default cap a connection's own maxInFlight still holds.
	b4 := claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute})
	if got := countBy(b4.Claims, byConn); got[plain] != 5 || got[junk] != 5 || got[one] != 0 || got[wide] != 0 {
		t.Errorf("claim without a default cap: %v, want the 5 left of each connection without its own limit", got)
	}
}

// circuitState reads a connection's circuit.
func circuitState(t *testing.T, f *testenv.Fixture, conn string) (failures, opened int, openFor float64, open bool) {
	t.Helper()
	var until *float64
	err := f.Pool.QueryRow(context.Background(), `select consecutive_failures, opened_count,
			extract(epoch from open_until - now())::float8
		from integration_outbox_connection_health where connection_id = $1`, conn).Scan(&failures, &opened, &until)
	if err != nil {
		t.Fatalf("reading the circuit of %s: %v", conn, err)
	}
	if until != nil {
		return failures, opened, *until, true
	}
	return failures, opened, 0, false
}

// endCooldown moves the circuit's open_until into the past.
func endCooldown(t *testing.T, f *testenv.Fixture, conn string) {
	t.Helper()
	if _, err := f.Pool.Exec(context.Background(), `update integration_outbox_connection_health
		set open_until = now() - interval '1 millisecond' where connection_id = $1`, conn); err != nil {
		t.Fatal(err)
	}
}

func transitions(r outbox.Recorded) string {
	s := ""
	for _, c := range r.Circuits {
		s += c.Transition + ";"
	}
	return s
}

func TestCircuitOpensHoldsRowsBackProbesAndCloses(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	const cooldown = 60 * time.Second
	s := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 3, Cooldown: cooldown})
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	broken := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	healthy := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	commands(t, f, org, broken, 10, base)
	commands(t, f, org, healthy, 10, base)
	claimOf := func(conn string, n int) []outbox.Claim {
		t.Helper()
		var out []outbox.Claim
		for _, c := range claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute,
			ConnectionMaxInFlight: n}).Claims {
			if c.ConnectionID == conn {
				out = append(out, c)
			} else if err := release(s, c); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}

	// Closed: two failures count, nothing opens.
	if r := finish(t, s, claimOf(broken, 2), outbox.StatusFailed, outbox.CircuitFailure); len(r.Circuits) != 0 {
		t.Fatalf("two failures under a threshold of 3 changed the circuit: %s", transitions(r))
	}
	if fails, _, _, open := circuitState(t, f, broken); fails != 2 || open {
		t.Fatalf("after 2 failures: %d consecutive failures, open %v; want 2, closed", fails, open)
	}
	// Closed -> open at the threshold.
	r := finish(t, s, claimOf(broken, 1), outbox.StatusFailed, outbox.CircuitFailure)
	if transitions(r) != "opened;" {
		t.Fatalf("third failure: transitions %q, want opened", transitions(r))
	}
	if _, opened, openFor, open := circuitState(t, f, broken); !open || opened != 1 || openFor < 55 || openFor > 60 {
		t.Fatalf("open circuit: opened %d, open for %.1fs; want once, ~60s", opened, openFor)
	}
	// Open: none of its rows is claimed, however due, and none uses an
	// attempt; the healthy connection's rows still are.
	attemptsBefore := f.Count(t, `select sum(attempt_count) from external_integration_outbox where integration_connection_id = $1`, broken)
	b := claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute})
	if n := countBy(b.Claims, byConn); n[broken] != 0 || n[healthy] != 10 {
		t.Fatalf("claim with the circuit open: %v, want the 10 healthy rows only", n)
	}
	if b.Held {
		t.Errorf("rows behind an open circuit reported as held by a cap (the dispatcher would wait for room)")
	}
	if after := f.Count(t, `select sum(attempt_count) from external_integration_outbox where integration_connection_id = $1`, broken); after != attemptsBefore {
		t.Errorf("rows behind the open circuit used attempts: %d -> %d", attemptsBefore, after)
	}
	finish(t, s, b.Claims, outbox.StatusCompleted, outbox.CircuitSuccess)

	// Open -> half-open: one probe row, and no second while it is in flight.
	endCooldown(t, f, broken)
	probe := claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute, ConnectionMaxInFlight: 10})
	if len(probe.Claims) != 1 || !probe.Claims[0].Probe || probe.Claims[0].ConnectionID != broken {
		t.Fatalf("half-open claim: %+v, want exactly one probe row of the broken connection", probe.Claims)
	}
	if again := claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute}); len(again.Claims) != 0 {
		t.Fatalf("a second row was claimed while the probe is in flight: %d", len(again.Claims))
	}
	// A probe whose lease expires (its push crashed) is replaced by another.
	if _, err := f.Pool.Exec(context.Background(), `update external_integration_outbox
		set lease_expires_at = now() - interval '1 second' where id = $1`, probe.Claims[0].ID); err != nil {
		t.Fatal(err)
	}
	probe = claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute})
	if len(probe.Claims) != 1 || !probe.Claims[0].Probe {
		t.Fatalf("after the probe's lease expired: %d rows claimed, want one new probe", len(probe.Claims))
	}

	// Half-open -> open again: the probe failed; the cooldown doubles.
	r = finish(t, s, probe.Claims, outbox.StatusFailed, outbox.CircuitFailure)
	if transitions(r) != "reopened;" {
		t.Fatalf("failed probe: transitions %q, want reopened", transitions(r))
	}
	if _, opened, openFor, open := circuitState(t, f, broken); !open || opened != 2 || openFor < 115 || openFor > 120 {
		t.Fatalf("reopened circuit: opened %d, open for %.1fs; want twice, ~120s", opened, openFor)
	}
	// Capped at an hour however often the probe fails.
	if _, err := f.Pool.Exec(context.Background(), `update integration_outbox_connection_health
		set opened_count = 12 where connection_id = $1`, broken); err != nil {
		t.Fatal(err)
	}
	endCooldown(t, f, broken)
	probe = claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute})
	finish(t, s, probe.Claims, outbox.StatusFailed, outbox.CircuitFailure)
	if _, _, openFor, _ := circuitState(t, f, broken); openFor < 3590 || openFor > 3600 {
		t.Fatalf("cooldown after many failed probes: %.0fs, want the 1h cap", openFor)
	}

	// Half-open -> closed: the probe succeeded; every row is claimable again.
	endCooldown(t, f, broken)
	probe = claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute})
	r = finish(t, s, probe.Claims, outbox.StatusCompleted, outbox.CircuitSuccess)
	if transitions(r) != "closed;" {
		t.Fatalf("successful probe: transitions %q, want closed", transitions(r))
	}
	if fails, opened, _, open := circuitState(t, f, broken); fails != 0 || opened != 0 || open {
		t.Fatalf("closed circuit: %d failures, opened %d, open %v", fails, opened, open)
	}
	left := f.Count(t, `select count(*) from external_integration_outbox
		where integration_connection_id = $1 and status <> 'completed'`, broken)
	if b := claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute}); len(b.Claims) != left {
		t.Fatalf("after closing: %d rows claimed, want the %d left", len(b.Claims), left)
	}
}

func TestCircuitSuccessResetsFailuresAndOffWritesNothing(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	commands(t, f, org, conn, 6, base)
	on := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 2, Cooldown: time.Minute})
	off := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: time.Minute}

	// A success with no failure before writes no health row.
	finish(t, on, claimBatch(t, on, p).Claims, outbox.StatusCompleted, outbox.CircuitSuccess)
	if n := f.Count(t, `select count(*) from integration_outbox_connection_health`); n != 0 {
		t.Fatalf("a success of a healthy connection wrote %d health rows", n)
	}
	finish(t, on, claimBatch(t, on, p).Claims, outbox.StatusFailed, outbox.CircuitFailure)
	finish(t, on, claimBatch(t, on, p).Claims, outbox.StatusCompleted, outbox.CircuitSuccess)
	if fails, _, _, open := circuitState(t, f, conn); fails != 0 || open {
		t.Fatalf("failure then success: %d consecutive failures, open %v; want 0, closed", fails, open)
	}
	// With the breaker off nothing counts, and no circuit state is left.
	finish(t, off, claimBatch(t, off, p).Claims, outbox.StatusFailed, outbox.CircuitFailure)
	finish(t, off, claimBatch(t, off, p).Claims, outbox.StatusFailed, outbox.CircuitFailure)
	if n := f.Count(t, `select count(*) from integration_outbox_connection_health`); n != 0 {
		t.Fatalf("breaker off: %d health rows left, want none", n)
	}
}

func release(s *outbox.Store, c outbox.Claim) error {
	n, err := s.Release(context.Background(), []outbox.Claim{c})
	if err == nil && n != 1 {
		err = fmt.Errorf("released %d rows, want 1", n)
	}
	return err
}
