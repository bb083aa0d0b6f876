package migrate_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"integration-outbox/internal/migrate"
	"integration-outbox/migrations"
)

// After every migration, the host's own insert of a queued command (a key,
// a connection, an entity, due at once) writes one entry into one index of
// ours, the claim's walk index (walk_unparked_idx), beside the host's primary key:
// neither key index (migration 10) nor the entity order index (migration
// 11), and it stores no updated_at (migration 11). A command the host
// schedules for later, and each step of ours that moves a row, still enter
// the entity order index: it holds what the claim's walk may pass by.
func TestAHostInsertWritesOneEntryIntoOneIndexOfOurs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if _, err := conn.Exec(ctx, migrations.HostStandIn); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	org := "6f1a4c1e-0000-4000-8000-0000000000b0"
	connID, _ := webhookConnection(t, conn, org)
	entries := func() map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, name := range outboxIndexNames(t, conn) {
			out[name] = indexEntries(t, conn, name)
		}
		return out
	}
	grew := func(before, after map[string]int) []string {
		var out []string
		for name, n := range after {
			if n != before[name] {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}
	hostInsert := func(nextAttempt string) {
		t.Helper()
		if _, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
				provider, command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, next_attempt_at)
			values ($1, $2, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(), '{"lines": []}',
				'po-' || gen_random_uuid(), `+nextAttempt+`)`, org, connID); err != nil {
			t.Fatal(err)
		}
	}

	before := entries()
	hostInsert("null")
	after := entries()
	want := []string{"external_integration_outbox_walk_unparked_idx", "external_integration_outbox_pkey"}
	slices.Sort(want)
	if got := grew(before, after); !slices.Equal(got, want) {
		t.Errorf("a host insert due at once wrote into %v, want only %v (indexes: %v)",
			got, want, slices.Sorted(maps.Keys(after)))
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox where updated_at is null`); n != 1 {
		t.Errorf("%d host rows read updated_at NULL, want the one inserted (it stores no updated_at)", n)
	}
	hostInsert("now() + interval '1 hour'")
	want = []string{"external_integration_outbox_walk_unparked_idx", "external_integration_outbox_entity_order_idx",
		"external_integration_outbox_pkey"}
	slices.Sort(want)
	if got := grew(after, entries()); !slices.Equal(got, want) {
		t.Errorf("a host insert due in an hour wrote into %v, want %v", got, want)
	}
}
