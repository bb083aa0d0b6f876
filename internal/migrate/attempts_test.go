package migrate_test

import (
	"context"
	"testing"

	"integration-outbox/internal/migrate"
)

// The down step that removes the attempt history removes nothing else: the
// outbox and its columns are still there right after it.
func TestAttemptHistoryDownDropsOnlyItsTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	attempts := func() int { return len(columns(t, conn, "public", "external_integration_attempts")) }
	if attempts() == 0 {
		t.Fatal("up did not create external_integration_attempts")
	}
	for range 100 {
		outboxBefore := len(columns(t, conn, "public", "external_integration_outbox"))
		if err := migrate.Down(ctx, url); err != nil {
			t.Fatal(err)
		}
		if attempts() == 0 {
			if after := len(columns(t, conn, "public", "external_integration_outbox")); after != outboxBefore {
				t.Errorf("the down step of the attempt history changed the outbox: %d columns, then %d", outboxBefore, after)
			}
			return
		}
	}
	t.Fatal("no down step removed external_integration_attempts")
}
