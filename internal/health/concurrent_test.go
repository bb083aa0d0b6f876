package health_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"integration-outbox/internal/event"
	"integration-outbox/internal/outbox"
)

// Two push batches of one connection recording their failures at the same
// moment, once it has failed long enough, disable it once: the record
// statement locks the connection's state row before it decides, so the
// second sees the first's disable. One event, one conflict.
func TestConcurrentRecordsDisableOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, defaults())
	ctx := context.Background()
	w.commands(t, 20)
	w.attempt(t, 2, false) // the failing period starts
	w.age(t, 6*24*time.Hour)

	var batches [][]outbox.Outcome
	for range 2 {
		claims, err := w.store.Claim(ctx, outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute, OrganizationID: w.org})
		if err != nil || len(claims) == 0 {
			t.Fatalf("claimed %d: %v", len(claims), err)
		}
		var outs []outbox.Outcome
		for _, c := range claims {
			if _, err := w.store.Start(ctx, []outbox.StartRequest{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
				ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken}}); err != nil {
				t.Fatal(err)
			}
			outs = append(outs, outbox.Outcome{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
				ClaimToken: c.ClaimToken, Status: outbox.StatusFailed, Circuit: outbox.CircuitFailure, ProviderCalled: true,
				HTTPStatus: 502, LastError: "HTTP 502: bad gateway"})
		}
		batches = append(batches, outs)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(batches))
	for _, outs := range batches {
		wg.Go(func() {
			if _, err := w.store.Record(ctx, outs); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := w.recorded(t, event.ConnectionDisabled); n != 1 {
		t.Errorf("%d Connection Disabled events, want 1", n)
	}
	if n := w.conflicts(t, "connection_disabled", "open"); n != 1 {
		t.Errorf("%d open connection_disabled conflicts, want 1", n)
	}
	if n := w.conflicts(t, "connection_failing", "open"); n != 1 {
		t.Errorf("%d open connection_failing conflicts, want 1", n)
	}
}
