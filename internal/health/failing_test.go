package health_test

import (
	"testing"
	"time"

	"integration-outbox/internal/event"
)

// A connection that fails for less than CONNECTION_FAILING_AFTER and then
// delivers makes no conflict and no event. One that fails longer gets one
// connection_failing conflict (no event: failing is not a transition the
// host is told about) and, when it delivers again, the conflict is resolved
// and one Connection Recovered is published with failingSince.
func TestAFailingConnectionRecoversWithOneEventOnlyAfterFailingAfter(t *testing.T) {
	t.Parallel()
	w := newWorld(t, defaults())
	w.commands(t, 4)

	w.attempt(t, 1, false)
	w.age(t, 30*time.Minute)
	w.attempt(t, 1, true)
	if n := w.conflicts(t, "connection_failing", "open") + w.conflicts(t, "connection_failing", "resolved"); n != 0 {
		t.Fatalf("%d connection_failing conflicts after 30 minutes of failures", n)
	}
	if got := w.publish(t); len(got) != 0 {
		t.Fatalf("events after a short failure: %v", got)
	}

	w.attempt(t, 1, false)
	w.age(t, 90*time.Minute)
	w.attempt(t, 1, false)
	if n := w.conflicts(t, "connection_failing", "open"); n != 1 {
		t.Fatalf("%d open connection_failing conflicts after 90 minutes, want 1", n)
	}
	var summary string
	if err := w.f.Pool.QueryRow(t.Context(), `select summary from external_integration_conflicts
		where integration_connection_id = $1 and conflict_type = 'connection_failing'`, w.conn).Scan(&summary); err != nil {
		t.Fatal(err)
	}
	t.Logf("connection_failing summary: %s", summary)
	w.attempt(t, 4, true)
	if open, resolved := w.conflicts(t, "connection_failing", "open"), w.conflicts(t, "connection_failing", "resolved"); open != 0 || resolved != 1 {
		t.Fatalf("connection_failing: %d open, %d resolved after the connection delivered", open, resolved)
	}
	got := w.publish(t)
	if len(got) != 1 || len(got[event.ConnectionRecovered]) != 1 {
		t.Fatalf("delivered %v, want one Connection Recovered", got)
	}
	requireDetail(t, event.ConnectionRecovered, got[event.ConnectionRecovered][0], "eventId", "organizationId",
		"connectionId", "provider", "occurredAt", "failingSince", "lastError")
}
