package outbox_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
)

// busyConnectionLoadSQL: ten organizations with a connection each (ordered,
// the default), $1 rows created a second apart, every 100th due (three in
// four queued, one in four failed and due again), each of its own purchase
// order, all on the first connection, the rest completed: no follower
// anywhere, every due row claimable (bench measurement 1's load).
const busyConnectionLoadSQL = `
insert into integration_connections (organization_id, provider, credential_reference, config_json)
select gen_random_uuid(), 'sandbox', 'integrations/bench/' || g, '{}' from generate_series(1, 10) g;
with c as (select id, organization_id, (row_number() over (order by id) - 1)::int as n from integration_connections)
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at,
    completed_at, created_at)
select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
    '{"externalSupplierId": "S"}', 'k-' || g,
    case when g % 100 <> 0 then 'completed' when g % 400 = 0 then 'failed' else 'queued' end,
    case when g % 100 <> 0 then 1 when g % 400 = 0 then 2 else 0 end,
    case when g % 400 = 0 then now() - interval '1 minute' end,
    case when g % 100 <> 0 then now() end,
    now() - make_interval(secs => $1::int - g)
from generate_series(1, $1::int) g
join c on c.n = g % 10`

// walkEntriesPassedOver loads rows onto a fresh database and returns how
// many entries of the claim's walk index the scheduled claim of 50 read and
// dropped (the "Rows Removed by Filter" of its scans of that index, as
// auto_explain reports the statement); the claim is rolled back.
func walkEntriesPassedOver(t *testing.T, rows int) float64 {
	t.Helper()
	ctx := context.Background()
	f := pg.NewDB(t)
	if _, err := f.Pool.Exec(ctx, strings.ReplaceAll(busyConnectionLoadSQL, "$1::int", strconv.Itoa(rows))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pool.Exec(ctx, "vacuum (analyze) external_integration_outbox, integration_connections"); err != nil {
		t.Fatal(err)
	}
	var passed float64
	var sum func(node map[string]any)
	sum = func(node map[string]any) {
		if node["Index Name"] == "external_integration_outbox_walk_unparked_idx" {
			removed, _ := node["Rows Removed by Filter"].(float64)
			loops, _ := node["Actual Loops"].(float64)
			passed += removed * loops
		}
		children, _ := node["Plans"].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				sum(m)
			}
		}
	}
	rec := &planRecorder{}
	tx, err := ourPool(t, f, rec).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	claims, err := outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute}).Claim(ctx,
		outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	plans, errs := rec.take()
	claimPlans := 0
	for _, p := range plans {
		if strings.Contains(p.Query, "with recursive budget") {
			claimPlans++
			sum(p.Plan)
		}
	}
	if len(claims) != 50 || claimPlans != 1 || len(errs) != 0 {
		t.Fatalf("claimed %d rows (want 50); auto_explain reported %d claim statements (want 1); errors %v", len(claims), claimPlans, errs)
	}
	return passed
}

// A claim reads the walk index up to what it takes on a connection whose
// due rows are all claimable, however many there are: the probe that looks
// for held-back rows older than the pair's first claimable one
// (claim_scheduled.sql, park_pairs) and the park's window seek to that bound
// in the walk index. With the bound in an OR beside "is null" the probe read
// every entry of the pair (bench measurement 1, 1M rows with 10,000 due on
// one connection: the claim took 55 ms against 4 ms before the followers
// were parked).
func TestAClaimReadsTheWalkIndexOnlyUpToWhatItTakes(t *testing.T) {
	t.Parallel()
	const rows = 300_000 // 3,000 due on the busy connection
	passed := walkEntriesPassedOver(t, rows)
	if passed > 100 {
		t.Errorf("the claim read and dropped %v entries of the walk index with 3,000 due rows on one connection, all claimable", passed)
	}
}
