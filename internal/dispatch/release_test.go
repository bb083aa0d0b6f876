package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// failingEnds is the real store, except that ending the rows nothing can
// deliver fails (the database went away between two statements).
type failingEnds struct {
	*outbox.Store
	noConnection, unsupported bool
}

var errInjected = errors.New("injected: connection reset")

func (s failingEnds) MarkUnsupported(ctx context.Context, claims []outbox.Claim, reason string) (int, error) {
	if s.unsupported {
		return 0, errInjected
	}
	return s.Store.MarkUnsupported(ctx, claims, reason)
}

func (s failingEnds) DeadLetterNoConnection(ctx context.Context, claims []outbox.Claim) (int, error) {
	if s.noConnection {
		return 0, errInjected
	}
	return s.Store.DeadLetterNoConnection(ctx, claims)
}

// When ending a batch's undeliverable rows fails, the run stops with the
// error and the rest of the batch goes back at once (queued, due, attempt
// given back), instead of waiting out its lease claimed and unsent.
func TestAFailedEndOfUndeliverableRowsReleasesTheRestOfTheBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store failingEnds
	}{
		{"unsupported", failingEnds{unsupported: true}},
		{"no connection", failingEnds{noConnection: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			routed := b.commands(t, 3, testenv.CommandOpts{})
			unrouted := b.commands(t, 1, testenv.CommandOpts{CommandType: "push_invoice"})
			orphan := b.commands(t, 1, testenv.CommandOpts{})[0]
			if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set integration_connection_id = null where id = $1`, orphan); err != nil {
				t.Fatal(err)
			}
			store := tc.store
			store.Store = outbox.NewStore(b.f.Pool)
			d, err := dispatch.New(store, b.sqs, dispatch.Config{
				Routes: dispatch.Routes{"push_purchase_order": b.queue}, MaxAttempts: 10, Lease: 15 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Run(ctx, dispatch.Request{}); !errors.Is(err, errInjected) {
				t.Fatalf("run error = %v, want the injected one", err)
			}
			back := append(routed, unrouted...)
			if tc.store.noConnection {
				back = append(back, orphan)
			} else if r := b.f.Row(t, orphan); r.Status != "dead_letter" {
				t.Errorf("row without connection: %s, want dead_letter (its end succeeded)", r.Status)
			}
			for _, id := range back {
				r := b.f.Row(t, id)
				if r.Status != "queued" || r.AttemptCount != 0 || r.ClaimToken != nil || r.LeaseExpiresAt != nil {
					t.Errorf("row %s after the failed run: status %s, attempts %d, token %v, lease %v; want queued, 0, none, none",
						id, r.Status, r.AttemptCount, r.ClaimToken, r.LeaseExpiresAt)
				}
			}
			if msgs := b.receiveAll(t); len(msgs) != 0 {
				t.Errorf("%d messages sent, want none: the run stopped before sending", len(msgs))
			}
		})
	}
}

// A run whose only due rows sit behind a half-open circuit's probe, or an
// open circuit, ends at once: only room that rows in flight can free (the
// caps) may keep it waiting. Under a connection cap it waits.
func TestRunWaitsOnlyForRoomThatRowsInFlightCanFree(t *testing.T) {
	t.Parallel()
	waits := func(t *testing.T, b bundle, connMax int) float64 {
		t.Helper()
		var buf bytes.Buffer
		store := outbox.NewStore(b.f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
		d, err := dispatch.New(store, b.sqs, dispatch.Config{
			Routes: dispatch.Routes{"push_purchase_order": b.queue}, MaxAttempts: 10, Lease: 15 * time.Minute,
			ConnectionMaxInFlight: connMax, RoomWait: 20 * time.Millisecond, Reserve: time.Second,
			Metrics: metrics.NewEmitter(&buf, "dispatch")})
		if err != nil {
			t.Fatal(err)
		}
		// A budget of 2 s, of which the last second is kept in reserve: a
		// run that waits for room claims again every 20 ms until then. (A
		// generous reserve: no claim on a loaded machine runs into the
		// deadline.)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := d.Run(ctx, dispatch.Request{}); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &doc); err != nil {
			t.Fatalf("EMF line %q: %v", buf.String(), err)
		}
		return doc["InFlightCapWaits"].(float64)
	}
	circuit := func(t *testing.T, b bundle, openUntil string) {
		t.Helper()
		if _, err := b.f.Pool.Exec(context.Background(), `insert into integration_outbox_connection_health
			(connection_id, organization_id, consecutive_failures, opened_count, open_until, opened_at)
			values ($1, $2, 5, 1, now() + $3::interval, now() - interval '2 minutes')`, b.conn, b.org, openUntil); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("probe in flight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.commands(t, 4, testenv.CommandOpts{})
		circuit(t, b, "-1 second")
		if n := waits(t, b, 0); n != 0 {
			t.Errorf("the run waited %v times behind a probe in flight, want it to end", n)
		}
		if n := b.f.Count(t, `select count(*) from external_integration_outbox where status = 'processing'`); n != 1 {
			t.Errorf("%d rows in flight, want the one probe", n)
		}
	})
	t.Run("circuit open", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.commands(t, 2, testenv.CommandOpts{})
		circuit(t, b, "1 hour")
		if n := waits(t, b, 0); n != 0 {
			t.Errorf("the run waited %v times behind an open circuit, want it to end", n)
		}
	})
	t.Run("connection cap", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.commands(t, 4, testenv.CommandOpts{})
		if n := waits(t, b, 2); n == 0 {
			t.Error("the run did not wait under a full connection cap, whose rows in flight free room")
		}
	})
}
