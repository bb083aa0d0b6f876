package health_test

import (
	"context"
	"testing"
	"time"

	"integration-outbox/internal/event"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// A command dead-lettered by any path writes one Command Dead-Lettered
// event: the record of a permanent rejection, the sweep of rows with no
// attempt left, and the release of a message that reached the command
// queue's dead-letter queue with no attempt left. Each is published once.
func TestEveryPathToDeadLetterPublishesOneCommandDeadLettered(t *testing.T) {
	t.Parallel()
	w := newWorld(t, defaults())
	ctx := context.Background()
	params := outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: time.Minute, OrganizationID: w.org}
	old := time.Now().Add(-time.Hour)

	// The record: the provider rejected the command.
	rejected := w.f.Command(t, testenv.CommandOpts{OrganizationID: w.org, ConnectionID: w.conn, CreatedAt: old})
	claims, err := w.store.Claim(ctx, params)
	if err != nil || len(claims) != 1 || claims[0].ID != rejected {
		t.Fatalf("claimed %v: %v", claims, err)
	}
	c := claims[0]
	if _, err := w.store.Start(ctx, []outbox.StartRequest{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
		ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Record(ctx, []outbox.Outcome{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
		ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken, Status: outbox.StatusDeadLetter,
		LastError: "HTTP 422: supplier unknown", ConflictType: outbox.ConflictProviderRejected,
		ConflictSummary: "rejected", Circuit: outbox.CircuitSuccess, ProviderCalled: true, HTTPStatus: 422}}); err != nil {
		t.Fatal(err)
	}

	// The sweep: a queued row at MAX_ATTEMPTS.
	exhausted := w.f.Command(t, testenv.CommandOpts{OrganizationID: w.org, ConnectionID: w.conn, AttemptCount: 10, CreatedAt: old})
	if n, err := w.store.DeadLetterExpired(ctx, params); err != nil || n != 1 {
		t.Fatalf("swept %d: %v", n, err)
	}

	// The release of a dead-lettered message on its last attempt.
	released := w.f.Command(t, testenv.CommandOpts{OrganizationID: w.org, ConnectionID: w.conn, AttemptCount: 9, CreatedAt: old})
	claims, err = w.store.Claim(ctx, params)
	if err != nil || len(claims) != 1 || claims[0].ID != released {
		t.Fatalf("claimed %v: %v", claims, err)
	}
	c = claims[0]
	rows, err := w.store.ReleaseDeadLettered(ctx, []outbox.DeadLetteredMessage{{OutboxID: c.ID,
		OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken}}, 10)
	if err != nil || len(rows) != 1 || rows[0].Status != outbox.StatusDeadLetter {
		t.Fatalf("released %v: %v", rows, err)
	}

	got := w.publish(t)
	if len(got) != 1 || len(got[event.CommandDeadLettered]) != 3 {
		t.Fatalf("delivered %v, want three Command Dead-Lettered", got)
	}
	seen := map[any]bool{}
	for _, d := range got[event.CommandDeadLettered] {
		requireDetail(t, event.CommandDeadLettered, d, "eventId", "organizationId", "connectionId", "provider",
			"occurredAt", "outboxId", "localEntityType", "attempt", "lastError")
		seen[d["outboxId"]] = true
	}
	for _, id := range []string{rejected, exhausted, released} {
		if !seen[id] {
			t.Errorf("no Command Dead-Lettered for %s", id)
		}
	}
	if got := w.publish(t); len(got) != 0 {
		t.Errorf("published again: %v", got)
	}
}
