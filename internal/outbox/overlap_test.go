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

// claimBehind runs a claim while another claim's transaction is still open
// (tx, not committed): on a store that serializes claims it waits for
// tx to end; one that does not returns at once. It commits tx once the
// second claim waits (or returned), and gives back what the second claim
// took while tx was open and in all.
func claimBehind(t *testing.T, f *testenv.Fixture, tx pgx.Tx, s *outbox.Store, p outbox.ClaimParams) (whileOpen int, b outbox.Batch) {
	t.Helper()
	ctx := context.Background()
	done := make(chan outbox.Batch, 1)
	go func() {
		b, err := s.ClaimBatch(ctx, p)
		if err != nil {
			t.Error(err)
		}
		done <- b
	}()
	for {
		select {
		case b := <-done:
			// Returned while the first claim was still open.
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			return len(b.Claims), b
		case <-time.After(10 * time.Millisecond):
		}
		if f.Count(t, `select count(*) from pg_locks where locktype = 'advisory' and not granted`) > 0 {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			return 0, <-done
		}
	}
}

// Claims that overlap (a schedule tick and wake-ups) are serialized even
// when no global or default cap is set: a connection's own maxInFlight
// holds across them, and so does a half-open circuit's one probe.
func TestOverlappingClaimsKeepAConnectionsLimitAndOneProbe(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(-time.Hour)
	t.Run("maxInFlight", func(t *testing.T) {
		t.Parallel()
		f := pg.NewDB(t)
		org := f.NewID(t)
		conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"maxInFlight": 1}})
		commands(t, f, org, conn, 3, base)
		s := outbox.NewStore(f.Pool)
		p := outbox.ClaimParams{Limit: 5, MaxAttempts: 10, Lease: time.Minute}
		tx, err := f.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if first := claimBatch(t, outbox.NewStore(tx), p); len(first.Claims) != 1 {
			t.Fatalf("first claim took %d rows, want the connection's 1", len(first.Claims))
		}
		whileOpen, second := claimBehind(t, f, tx, s, p)
		if whileOpen != 0 || len(second.Claims) != 0 {
			t.Errorf("an overlapping claim took %d rows (%d before the first committed); maxInFlight 1 was taken already",
				len(second.Claims), whileOpen)
		}
		if n := f.Count(t, `select count(*) from external_integration_outbox where status = 'processing'`); n != 1 {
			t.Errorf("%d rows in flight on a connection whose maxInFlight is 1", n)
		}
	})
	t.Run("probe", func(t *testing.T) {
		t.Parallel()
		f := pg.NewDB(t)
		org := f.NewID(t)
		conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
		commands(t, f, org, conn, 3, base)
		openCircuit(t, f, org, conn, "-1 second")
		s := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
		p := outbox.ClaimParams{Limit: 5, MaxAttempts: 10, Lease: time.Minute}
		tx, err := f.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		first := claimBatch(t, outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute}), p)
		if len(first.Claims) != 1 || !first.Claims[0].Probe {
			t.Fatalf("first claim %+v, want one probe", first.Claims)
		}
		if _, second := claimBehind(t, f, tx, s, p); len(second.Claims) != 0 {
			t.Errorf("an overlapping claim took %d more rows of a half-open circuit: a second probe", len(second.Claims))
		}
	})
}

// openCircuit writes the circuit of conn, its cooldown ending at now() +
// until (past: half-open).
func openCircuit(t *testing.T, f *testenv.Fixture, org, conn, until string) {
	t.Helper()
	if _, err := f.Pool.Exec(context.Background(), `insert into integration_outbox_connection_health
		(connection_id, organization_id, consecutive_failures, opened_count, open_until, opened_at)
		values ($1, $2, 5, 1, now() + $3::interval, now() - interval '2 minutes')`, conn, org, until); err != nil {
		t.Fatal(err)
	}
}

// CIRCUIT_FAILURE_THRESHOLD=0 switches the breaker off: an open or half-open
// circuit no longer holds its rows back, no circuit state is left, and a
// breaker switched on again starts with every circuit closed.
func TestBreakerOffIgnoresEveryCircuitAndStartsClosedWhenOn(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	open := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	halfOpen := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	commands(t, f, org, open, 4, base)
	commands(t, f, org, halfOpen, 4, base)
	openCircuit(t, f, org, open, "1 hour")
	openCircuit(t, f, org, halfOpen, "-1 second")
	p := outbox.ClaimParams{Limit: 2, MaxAttempts: 10, Lease: time.Minute}

	off := outbox.NewStore(f.Pool)
	b := claimBatch(t, off, p)
	if got := countBy(b.Claims, byConn); got[open] != 1 || got[halfOpen] != 1 {
		t.Fatalf("breaker off: claimed %v, want a row of each connection whatever their circuits say", got)
	}
	for _, c := range b.Claims {
		if c.Probe {
			t.Errorf("breaker off: row %s claimed as a probe", c.ID)
		}
	}
	finish(t, off, b.Claims, outbox.StatusFailed, outbox.CircuitFailure)
	if n := f.Count(t, `select count(*) from integration_outbox_connection_health`); n != 0 {
		t.Fatalf("breaker off: %d circuit rows left, want none", n)
	}
	// Both connections' rows flow: the half-open one gives more than its
	// one probe at a time.
	b = claimBatch(t, off, outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute})
	if got := countBy(b.Claims, byConn); got[open] != 4 || got[halfOpen] != 4 {
		t.Fatalf("breaker off: second claim %v, want all 4 of each (the failed one is due again)", got)
	}
	finish(t, off, b.Claims, outbox.StatusCompleted, outbox.CircuitSuccess)

	on := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	commands(t, f, org, open, 3, base)
	b = claimBatch(t, on, outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute})
	if got := countBy(b.Claims, byConn); got[open] != 3 || b.Held {
		t.Fatalf("breaker on again: claimed %v (held %v), want every row of a closed circuit", got, b.Held)
	}
}

// Rows taken outside the walk over claimable rows (due follow-ups, expired
// leases) take their turn in the same rotation as the rest: a tenant with
// many follow-ups whose id sorts last neither freezes the rotation nor
// crowds the others out.
func TestFollowUpsTakeTheirTurnInTheOneRotation(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	var small []string
	for range 6 {
		org := f.NewID(t)
		small = append(small, org)
		commands(t, f, org, f.Connection(t, testenv.ConnectionOpts{OrganizationID: org}), 5, base)
	}
	// The follow-up tenant's id sorts after every other.
	big := "ffffffff" + f.NewID(t)[8:]
	followUps := commands(t, f, big, f.Connection(t, testenv.ConnectionOpts{OrganizationID: big}), 20, base.Add(-30*time.Minute))
	if _, err := f.Pool.Exec(context.Background(), `update external_integration_outbox
		set status = 'processing', provider_status = 'accepted', attempt_count = 1,
			next_attempt_at = now() - interval '1 minute' where id = any($1)`, followUps); err != nil {
		t.Fatal(err)
	}
	s := outbox.NewStore(f.Pool)
	p := outbox.ClaimParams{Limit: 3, MaxAttempts: 10, Lease: time.Minute}
	got := map[string]int{}
	for i := range 5 {
		b := claimBatch(t, s, p)
		if len(b.Claims) != 3 {
			t.Fatalf("claim %d took %d rows, want 3", i, len(b.Claims))
		}
		for _, c := range b.Claims {
			got[c.OrganizationID]++
		}
		p.After = b.NextAfter(p.After)
		if i == 2 {
			// 9 rows among 7 tenants: a full turn.
			for _, org := range append(small, big) {
				if got[org] == 0 {
					t.Errorf("after a full turn (3 claims of 3) tenant %s had no row: %v", org, got)
				}
			}
		}
	}
	for _, org := range append(small, big) {
		if got[org] < 2 || got[org] > 3 {
			t.Errorf("tenant %s got %d of 15 rows among 7 tenants, want 2 or 3: %v", org, got[org], got)
		}
	}
}

// Held says that an in-flight cap held due rows back (rows in flight free
// that room); rows the circuit breaker holds, or the one-probe rule, do not
// set it.
func TestHeldIsSetByTheCapsOnlyNotByTheBreaker(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	commands(t, f, org, conn, 4, base)
	openCircuit(t, f, org, conn, "-1 second")
	s := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	p := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
	b := claimBatch(t, s, p)
	if len(b.Claims) != 1 || !b.Claims[0].Probe || b.Held {
		t.Fatalf("half-open: %d claimed (probe %v), held %v; want one probe, not held", len(b.Claims),
			len(b.Claims) == 1 && b.Claims[0].Probe, b.Held)
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 || b.Held {
		t.Fatalf("probe in flight: %d claimed, held %v; want none, not held", len(b.Claims), b.Held)
	}
	if _, err := f.Pool.Exec(context.Background(), `update integration_outbox_connection_health
		set open_until = now() + interval '1 hour' where connection_id = $1`, conn); err != nil {
		t.Fatal(err)
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 || b.Held {
		t.Fatalf("open: %d claimed, held %v; want none, not held", len(b.Claims), b.Held)
	}
	// Under caps it is held, with or without a row claimed.
	other := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	commands(t, f, org, other, 3, base)
	p.ConnectionMaxInFlight = 2
	if b := claimBatch(t, s, p); len(b.Claims) != 2 || !b.Held {
		t.Fatalf("connection cap: %d claimed, held %v; want 2, held", len(b.Claims), b.Held)
	}
	if b := claimBatch(t, s, p); len(b.Claims) != 0 || !b.Held {
		t.Fatalf("connection cap full: %d claimed, held %v; want none, held", len(b.Claims), b.Held)
	}
}

// A lowered MAX_ATTEMPTS strands no row: a due queued or failed row at or
// past it ends in dead_letter with its conflict at the next run's sweep, as
// an exhausted row does; a row not due yet waits for its time.
func TestLoweredMaxAttemptsEndsRowsPastItAsDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	failed := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
		Status: "failed", AttemptCount: 5, NextAttemptAt: &past})
	queued := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
		AttemptCount: 3})
	later := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
		Status: "failed", AttemptCount: 4, NextAttemptAt: &future})
	fresh := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
		Status: "failed", AttemptCount: 2, NextAttemptAt: &past})
	p := outbox.ClaimParams{MaxAttempts: 3}
	n, err := b.store.DeadLetterExpired(context.Background(), p)
	if err != nil || n != 2 {
		t.Fatalf("sweep = %d, %v; want the 2 due rows past MAX_ATTEMPTS 3", n, err)
	}
	for _, id := range []string{failed, queued} {
		r := b.f.Row(t, id)
		if r.Status != "dead_letter" || r.LastError == nil || !strings.Contains(*r.LastError, "attempts exhausted") {
			t.Errorf("row %s: %s (%v), want dead_letter, attempts exhausted", id, r.Status, deref(r.LastError))
		}
		if got := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1
			and status = 'open' and conflict_type = 'provider_rejected' and severity = 'high'`, id); got != 1 {
			t.Errorf("row %s has %d open conflicts, want 1", id, got)
		}
	}
	if r := b.f.Row(t, later); r.Status != "failed" {
		t.Errorf("row not due yet: %s, want it left failed until its time", r.Status)
	}
	if r := b.f.Row(t, fresh); r.Status != "failed" {
		t.Errorf("row with attempts left: %s, want failed", r.Status)
	}
	if n, _ := b.store.DeadLetterExpired(context.Background(), p); n != 0 {
		t.Errorf("a second sweep ended %d rows, want none", n)
	}
}

// A record retried after its commit acknowledgement was lost (the first one
// committed) adds nothing: one attempt in the history, one conflict.
func TestRecordRepeatedAfterALostAcknowledgementAddsNothing(t *testing.T) {
	t.Parallel()
	for _, status := range []outbox.Status{outbox.StatusProcessing, outbox.StatusFailed, outbox.StatusDeadLetter, outbox.StatusCompleted} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
			claims, err := b.store.Claim(ctx, params(1))
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %v %v", claims, err)
			}
			c := claims[0]
			if _, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
				ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken}}); err != nil {
				t.Fatal(err)
			}
			o := outbox.Outcome{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
				ClaimToken: c.ClaimToken, Status: status, ProviderCalled: true, RetryIn: time.Hour}
			switch status {
			case outbox.StatusProcessing:
				o.ProviderStatus = "accepted"
			case outbox.StatusDeadLetter:
				o.ConflictType, o.ConflictSummary, o.LastError = outbox.ConflictProviderRejected, "rejected", "HTTP 400"
			}
			for i := range 2 {
				got, err := b.store.Record(ctx, []outbox.Outcome{o})
				if err != nil {
					t.Fatal(err)
				}
				if want := 1 - i; len(got.IDs) != want {
					t.Errorf("record %d recorded %d rows, want %d", i+1, len(got.IDs), want)
				}
			}
			if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1`, id); n != 1 {
				t.Errorf("%d attempts in the history after a repeated record, want 1", n)
			}
			if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1`, id); status == outbox.StatusDeadLetter && n != 1 {
				t.Errorf("%d conflicts after a repeated record, want 1", n)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
