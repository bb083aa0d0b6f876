package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
)

// The claim's plan keeps its shape however few of the outbox's pages are
// all-visible: every step is an index probe. Without the claim's own
// settings, a table whose pages are not all-visible (a bulk load, a
// restore, VACUUM FULL, a small hot table) makes the planner turn the walk
// into a bitmap scan of every due row (hundreds of times slower at 1M rows:
// bench/results.md).
func TestClaimPlanIsIndexProbesAtAnyAllVisibleShare(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	// 200 organizations, 100k rows, one in ten due, none vacuumed: no page
	// is all-visible.
	if _, err := f.Pool.Exec(ctx, `
		insert into integration_connections (organization_id, provider, config_json)
		select gen_random_uuid(), 'sandbox', '{}' from generate_series(1, 200);
		with c as (select id, organization_id, (row_number() over (order by id) - 1)::int as n from integration_connections)
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, completed_at, created_at)
		select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
			'{"externalSupplierId": "S"}', 'k-' || g, case when g % 10 = 0 then 'queued' else 'completed' end, 0,
			case when g % 10 <> 0 then now() end, now() - make_interval(secs => 100000 - g)
		from generate_series(1, 100000) g join c on c.n = g % 200;
		analyze external_integration_outbox;
		analyze integration_connections`); err != nil {
		t.Fatal(err)
	}
	var share float64
	if err := f.Pool.QueryRow(ctx, `select relallvisible::float8 / greatest(relpages, 1) from pg_class
		where oid = 'external_integration_outbox'::regclass`).Scan(&share); err != nil || share > 0.1 {
		t.Fatalf("all-visible share %.2f (%v), want a table with few all-visible pages", share, err)
	}
	s := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	p := outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute, MaxInFlight: 5000, ConnectionMaxInFlight: 10}
	plan := func(setup bool) string {
		t.Helper()
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		plan, err := s.ClaimPlan(ctx, tx, p, setup)
		if err != nil {
			t.Fatal(err)
		}
		return plan
	}
	got := plan(true)
	for _, node := range []string{`"Bitmap Heap Scan"`, `"Bitmap Index Scan"`} {
		if strings.Contains(got, node) {
			t.Errorf("the claim's plan has a %s on a table with few all-visible pages", node)
		}
	}
	if !strings.Contains(got, "external_integration_outbox_walk_unparked_idx") {
		t.Error("the claim's plan does not walk external_integration_outbox_walk_unparked_idx")
	}
	if !strings.Contains(got, "external_integration_outbox_entity_order_idx") {
		t.Error("the claim's plan does not check per-entity order through external_integration_outbox_entity_order_idx")
	}
	// The check can fail: left to itself, the planner picks bitmap scans
	// on this table (if it no longer does, the table must change for the
	// test to prove anything).
	if plain := plan(false); !strings.Contains(plain, `"Bitmap Heap Scan"`) {
		t.Error("without the claim's settings the planner chose no bitmap scan here either: this table no longer provokes the flip")
	}
}
