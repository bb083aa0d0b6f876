package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// sweepEffect runs the sweep for p in a transaction it rolls back, and says
// what the sweep would do: the rows it ends, the starts it deletes, and
// whether a claim could find anything.
func sweepEffect(t *testing.T, b bundle, p outbox.ClaimParams) (sw outbox.Sweep, startsDeleted int) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	starts := func() int {
		var n int
		if err := tx.QueryRow(ctx, `select count(*) from integration_outbox_starts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := starts()
	if sw, err = outbox.NewStore(tx).Sweep(ctx, p); err != nil {
		t.Fatal(err)
	}
	return sw, before - starts()
}

// insertStart writes a start of org's row outboxID as a push would have,
// age ago, under a claim token the row does not hold (a push that crashed
// before its record, or a claim given back).
func insertStart(t *testing.T, b bundle, org, outboxID string, age time.Duration) {
	t.Helper()
	if _, err := b.f.Pool.Exec(context.Background(), `insert into integration_outbox_starts
		(claim_token, outbox_id, organization_id, started_at, created_at)
		values (gen_random_uuid(), $1, $2, now() - make_interval(secs => $3), now() - make_interval(secs => $3))`,
		outboxID, org, age.Seconds()); err != nil {
		t.Fatal(err)
	}
}

// Idle says a run has nothing to do only when the sweep would change
// nothing and a claim would find nothing, in the run's scope: each kind of
// row the sweep or a claim acts on makes it false, and each case also runs
// the sweep (rolled back) to show that it agrees. Rows no step acts on
// (ended rows, a start younger than ten minutes, another organization's
// rows) leave it true.
func TestIdleIsFalseWhenTheSweepOrAClaimWouldDoSomething(t *testing.T) {
	t.Parallel()
	// Each case adds its rows to a fresh database where an idle run's
	// scope already holds rows no step acts on.
	cases := []struct {
		name string
		add  func(t *testing.T, b bundle) (outboxID string)
		// What the sweep does in the organization: the rows it ends, the
		// starts it deletes, and whether a claim could find something (its
		// probes read the rows as they were before it: a row it ends
		// counts).
		deadLettered, startsDeleted int
		claimable                   bool
	}{
		{name: "nothing to do"},
		{name: "a queued row", claimable: true, add: func(t *testing.T, b bundle) string {
			return b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
		}},
		{name: "a queued row without a connection", claimable: true, add: func(t *testing.T, b bundle) string {
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
			if _, err := b.f.Pool.Exec(context.Background(), `update external_integration_outbox
				set integration_connection_id = null where id = $1`, id); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{name: "a failed row not due yet", claimable: true, add: func(t *testing.T, b bundle) string {
			later := time.Now().Add(time.Hour)
			return b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
				Status: "failed", AttemptCount: 1, NextAttemptAt: &later})
		}},
		{name: "a processing row, lease expired, attempts exhausted", deadLettered: 1, claimable: true, add: func(t *testing.T, b bundle) string {
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
				Status: "processing", AttemptCount: 10})
			if _, err := b.f.Pool.Exec(context.Background(), `update external_integration_outbox
				set claim_token = gen_random_uuid(), lease_expires_at = now() - interval '1 minute', started_at = now() - interval '2 minutes'
				where id = $1`, id); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{name: "an accepted row whose follow-up is due, attempts exhausted", deadLettered: 1, claimable: true, add: func(t *testing.T, b bundle) string {
			past := time.Now().Add(-time.Minute)
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
				Status: "processing", AttemptCount: 10, NextAttemptAt: &past})
			if _, err := b.f.Pool.Exec(context.Background(), `update external_integration_outbox
				set claim_token = gen_random_uuid(), provider_status = 'accepted' where id = $1`, id); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{name: "a forgotten start", startsDeleted: 1, add: func(t *testing.T, b bundle) string {
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
				Status: "completed", AttemptCount: 1})
			insertStart(t, b, b.org, id, 11*time.Minute)
			return id
		}},
		{name: "a waiting row", claimable: true, add: func(t *testing.T, b bundle) string {
			awaited := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
				Status: "completed", AttemptCount: 1})
			later := time.Now().Add(time.Hour)
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
				Status: "failed", NextAttemptAt: &later})
			if _, err := b.f.Pool.Exec(context.Background(), `update external_integration_outbox
				set waiting_for_outbox_id = $1 where id = $2`, awaited, id); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		// A parked follower (claim_scheduled.sql) is in no claim index but
		// the waiting one; with its awaited row gone the sweep wakes it.
		{name: "a parked follower whose awaited row is gone", claimable: true, add: func(t *testing.T, b bundle) string {
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
			if _, err := b.f.Pool.Exec(context.Background(), `update external_integration_outbox
				set waiting_for_outbox_id = gen_random_uuid(), next_attempt_at = created_at + interval '1 second'
				where id = $1`, id); err != nil {
				t.Fatal(err)
			}
			return id
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			// Rows no step acts on: ended ones, a start younger than ten
			// minutes of a completed row.
			for _, status := range []string{"completed", "dead_letter", "uncertain", "unsupported"} {
				b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
					Status: status, AttemptCount: 10})
			}
			done := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
				Status: "completed", AttemptCount: 1})
			insertStart(t, b, b.org, done, 9*time.Minute)
			var id string
			if tc.add != nil {
				id = tc.add(t, b)
			}
			busy := tc.deadLettered+tc.startsDeleted > 0 || tc.claimable
			p := outbox.ClaimParams{MaxAttempts: 10}
			check := func(scope string, p outbox.ClaimParams, wantIdle bool) {
				t.Helper()
				idle, err := b.store.Idle(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if idle != wantIdle {
					t.Errorf("%s: Idle = %v, want %v", scope, idle, wantIdle)
				}
				// The sweep agrees: it does something exactly when Idle is
				// false.
				sw, deleted := sweepEffect(t, b, p)
				if acts := sw.DeadLettered > 0 || deleted > 0 || sw.Claimable; acts == idle {
					t.Errorf("%s: Idle = %v, but the sweep ended %d rows, deleted %d starts, claimable %v",
						scope, idle, sw.DeadLettered, deleted, sw.Claimable)
				}
			}
			check("every organization", p, !busy)
			p.OrganizationID = b.org
			check("the organization", p, !busy)
			if sw, deleted := sweepEffect(t, b, p); sw.DeadLettered != tc.deadLettered || deleted != tc.startsDeleted ||
				sw.Claimable != tc.claimable {
				t.Errorf("the sweep ended %d rows, deleted %d starts, claimable %v; the case wants %d, %d, %v",
					sw.DeadLettered, deleted, sw.Claimable, tc.deadLettered, tc.startsDeleted, tc.claimable)
			}
			p.OrganizationID = b.f.NewID(t)
			check("another organization", p, true)
			if id == "" {
				return
			}
			// A listed run: the rows it lists; a forgotten start is in the
			// sweep's scope whatever the list (its organization's).
			p.OrganizationID = b.org
			p.IDs = []string{id}
			check("the row listed", p, false)
			p.IDs = []string{b.f.NewID(t)}
			check("another row listed", p, tc.startsDeleted == 0)
		})
	}
}

// The starts the sweep deletes are those older than ten minutes of any
// organization when the run has none: a start of one organization makes
// an unscoped run busy, and that organization's run, not another's.
func TestIdleReadsTheStartsOfTheRunsOrganization(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	other := b.f.NewID(t)
	insertStart(t, b, other, b.f.NewID(t), time.Hour)
	for _, c := range []struct {
		org  string
		idle bool
	}{{"", false}, {other, false}, {b.org, true}} {
		idle, err := b.store.Idle(ctx, outbox.ClaimParams{MaxAttempts: 10, OrganizationID: c.org})
		if err != nil || idle != c.idle {
			t.Errorf("Idle for organization %q = %v, %v; want %v", c.org, idle, err, c.idle)
		}
	}
	// Its statement runs in a transaction of the caller's too.
	tx, err := b.f.Pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if idle, err := outbox.NewStore(tx).Idle(ctx, outbox.ClaimParams{OrganizationID: b.org}); err != nil || !idle {
		t.Errorf("Idle in a read-only transaction = %v, %v; want true: it writes nothing", idle, err)
	}
}
