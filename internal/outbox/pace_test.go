package outbox_test

import (
	"context"
	"testing"
	"time"

	"integration-outbox/internal/health"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/testenv"
)

// A connection its provider paused (a 429) has none of its rows claimed
// until the pause ends, and its rows do not make a run wait for room; the
// other connections go on.
func TestAPausedConnectionsRowsWaitForThePauseToEnd(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	paused := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero"})
	other := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero"})
	commands(t, f, org, paused, 3, base)
	commands(t, f, org, other, 3, base)
	ctx := context.Background()
	if err := pace.NewPacer(f.Pool).Pause(ctx, pace.Connection{ID: paused, OrganizationID: org},
		time.Now().Add(time.Hour), "429"); err != nil {
		t.Fatal(err)
	}
	p := outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute}
	b := claimBatch(t, s, p)
	if got := countBy(b.Claims, byConn); got[paused] != 0 || got[other] != 3 {
		t.Fatalf("claimed %v, want the other connection's 3 rows and none of the paused one", got)
	}
	if b.Held {
		t.Error("the paused connection's rows count as held back by a cap: a run would wait for them")
	}
	if _, err := f.Pool.Exec(ctx, `update integration_outbox_connection_pace set paused_until = now() - interval '1 second'
		where connection_id = $1`, paused); err != nil {
		t.Fatal(err)
	}
	if got := countBy(claimBatch(t, s, p).Claims, byConn); got[paused] != 3 {
		t.Errorf("after the pause claimed %v, want the paused connection's 3 rows", got)
	}
}

// A provider's default in-flight limit applies to a connection whose
// config_json sets none; the connection's own maxInFlight wins over it, and
// it wins over CONNECTION_MAX_IN_FLIGHT.
func TestAProvidersDefaultInFlightLimitAppliesUnlessTheConnectionSetsOne(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	base := time.Now().Add(-time.Hour)
	org := f.NewID(t)
	xero := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero"})
	own := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero", Config: map[string]any{"maxInFlight": 4}})
	hook := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook"})
	for _, c := range []string{xero, own, hook} {
		commands(t, f, org, c, 8, base)
	}
	b := claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute,
		ConnectionMaxInFlight: 3, ProviderMaxInFlight: map[string]int{"xero": 2, "quickbooks": 10}})
	got := countBy(b.Claims, byConn)
	for c, n := range map[string]int{xero: 2, own: 4, hook: 3} {
		if got[c] != n {
			t.Errorf("connection %s: %d rows leased, want %d (%v)", c, got[c], n, got)
		}
	}
}

// An attempt given back (the connection paused or paced) leaves the row's
// attempts as they were before its claim, and its history shows the try.
func TestAnUnchargedAttemptIsGivenBack(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero"})
	id := commands(t, f, org, conn, 1, time.Now().Add(-time.Minute))[0]
	ctx := context.Background()
	c := claimBatch(t, s, outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: time.Minute}).Claims[0]
	if _, err := s.Start(ctx, []outbox.StartRequest{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
		ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(ctx, []outbox.Outcome{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
		ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken, Status: outbox.StatusFailed,
		LastError: "HTTP 429: paused for 60s", RetryIn: time.Minute, Uncharged: true, ProviderCalled: true, HTTPStatus: 429}}); err != nil {
		t.Fatal(err)
	}
	row := f.Row(t, id)
	if row.Status != "failed" || row.AttemptCount != 0 {
		t.Errorf("after an uncharged attempt the row is %s at attempt %d, want failed at 0", row.Status, row.AttemptCount)
	}
	if n := f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1 and attempt = 1 and http_status = 429`, id); n != 1 {
		t.Errorf("%d history rows of the try, want 1 (attempt 1, HTTP 429)", n)
	}
}

// A connection needing reauthorization (its OAuth2 grant refused) has none
// of its rows claimed, by the walk or a listed-ids rerun, and they do not
// make a run wait; once the host reconnects it they go.
func TestAConnectionNeedingReauthorizationHoldsItsRows(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	s := outbox.NewStore(f.Pool)
	org := f.NewID(t)
	held := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero"})
	ids := commands(t, f, org, held, 3, time.Now().Add(-time.Hour))
	ctx := context.Background()
	// What internal/credential records when the provider refuses the grant.
	if _, err := health.MarkUnauthorized(ctx, f.Pool, health.Unauthorized{OrganizationID: org, ConnectionID: held,
		Reason: "invalid_grant"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []outbox.ClaimParams{
		{Limit: 50, MaxAttempts: 10, Lease: time.Minute},
		{Limit: 50, MaxAttempts: 10, Lease: time.Minute, IDs: ids},
	} {
		b := claimBatch(t, s, p)
		if len(b.Claims) != 0 || b.Held {
			t.Fatalf("claimed %d rows of a connection needing reauthorization (held %v)", len(b.Claims), b.Held)
		}
	}
	// And when the host has reconnected it.
	if _, _, _, err := health.Reauthorized(ctx, f.Pool, org, held, ""); err != nil {
		t.Fatal(err)
	}
	if got := len(claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute}).Claims); got != 3 {
		t.Errorf("reconnected, claimed %d rows, want 3", got)
	}
}
