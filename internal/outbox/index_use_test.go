package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
)

// indexUseLoadSQL fills a migrated outbox so the planner has a real choice:
// 1,000 organizations with a connection each, 100k rows with keys, mostly
// completed; 1 in 50 queued, 1 in 100 failed (due), 1 in 200 leased (half of
// them expired), 1 in 500 accepted with a follow-up due, 1 in 1,000 queued
// without a connection, the host's older keyed rows beside the enqueued ones.
const indexUseLoadSQL = `
insert into integration_connections (id, organization_id, provider)
select ('00000000-0000-4000-9000-' || lpad(g::text, 12, '0'))::uuid,
    ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'sandbox'
from generate_series(0, 999) g;
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, idempotency_key, idempotency_enforced, status, attempt_count,
    next_attempt_at, claim_token, lease_expires_at, provider_status, created_at)
select ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid,
    case when g % 1000 = 7 then null else ('00000000-0000-4000-9000-' || lpad((g % 1000)::text, 12, '0'))::uuid end,
    'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(), 'key-' || g, g % 2 = 0,
    case when g % 1000 = 7 or g % 50 = 0 then 'queued' when g % 100 = 1 then 'failed'
         when g % 200 = 3 or g % 500 = 4 then 'processing' else 'completed' end,
    g % 3, now() - interval '1 minute',
    case when g % 200 = 3 or g % 500 = 4 then gen_random_uuid() end,
    case when g % 200 = 3 then now() + case when g % 400 = 3 then interval '10 minutes' else interval '-1 minute' end end,
    case when g % 500 = 4 then 'accepted' end,
    now() - make_interval(secs => 100000 - g)
from generate_series(1, 100000) g;
analyze external_integration_outbox;
analyze integration_connections;
analyze external_integration_conflicts`

// Every index of ours on the host's outbox is read by a production
// statement: on a loaded table, the plan of that statement uses it. (The
// requeueable tenant index is checked with its statement in internal/rerun.)
func TestEveryIndexOfOursServesItsStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	if _, err := f.Pool.Exec(ctx, indexUseLoadSQL); err != nil {
		t.Fatal(err)
	}
	org := "00000000-0000-4000-8000-000000000042"
	claimArgs := pgx.NamedArgs{"claim_limit": 50, "max_attempts": 10, "lease_seconds": 900.0,
		"organization_id": nil, "ids": nil, "max_in_flight": 5000, "connection_max_in_flight": 10,
		"after_organization": "00000000-0000-0000-0000-000000000000", "circuit_on": true}
	deadLetterArgs := pgx.NamedArgs{"max_attempts": 10, "organization_id": nil, "ids": nil}
	idleArgs := pgx.NamedArgs{"organization_id": nil, "ids": nil}
	// A wake-up's: on this table, where one row in 33 is queued or failed,
	// the unscoped probe of those rows is planned as a sequential scan that
	// stops at the first (so is the sweep's own).
	idleOrgArgs := pgx.NamedArgs{"organization_id": org, "ids": nil}
	// A batch of 10 results, as a push function records them.
	var results []string
	for i := range 10 {
		results = append(results, fmt.Sprintf(`{"id":"00000000-0000-4000-a000-%012d","organization_id":"%s",`+
			`"claim_token":"00000000-0000-4000-b000-%012d","status":"completed"}`, i, org, i))
	}
	recordArgs := pgx.NamedArgs{"outcomes": "[" + strings.Join(results, ",") + "]", "failure_threshold": 5,
		"cooldown_seconds": 60.0, "events_on": false, "failing_after_seconds": 900.0, "disable_after_seconds": 0.0,
		"disable_min_span_seconds": 0.0, "command_failing_after_attempts": 3}
	// The enqueue function's look-up of a key, as installed.
	var existingSQL string
	if err := f.Pool.QueryRow(ctx, `select prosrc from pg_proc where proname = 'integration_outbox_enqueue_existing'`).Scan(&existingSQL); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		index, statement, sql string
		args                  []any
	}{
		{"external_integration_outbox_walk_unparked_idx", "claim.sql (the walk over organization, connection pairs)", outbox.ClaimSQL, []any{claimArgs}},
		{"external_integration_outbox_claim_orphan_idx", "claim.sql (due rows without a connection)", outbox.ClaimSQL, []any{claimArgs}},
		{"external_integration_outbox_entity_order_idx", "claim.sql (per-entity order)", outbox.ClaimSQL, []any{claimArgs}},
		{"external_integration_outbox_connection_leased_idx", "claim.sql (a connection's leased rows)", outbox.ClaimSQL, []any{claimArgs}},
		{"external_integration_outbox_follow_up_idx", "claim.sql (follow-ups due)", outbox.ClaimSQL, []any{claimArgs}},
		{"external_integration_outbox_connection_leased_idx", "dead_letter_expired.sql (expired leases)", outbox.DeadLetterExpiredSQL, []any{deadLetterArgs}},
		{"external_integration_outbox_follow_up_idx", "dead_letter_expired.sql (follow-ups due)", outbox.DeadLetterExpiredSQL, []any{deadLetterArgs}},
		// The two claim indexes hold every queued and failed row.
		{"external_integration_outbox_walk_unparked_idx", "dead_letter_expired.sql (queued and failed rows with a connection)", outbox.DeadLetterExpiredSQL, []any{deadLetterArgs}},
		{"external_integration_outbox_claim_orphan_idx", "dead_letter_expired.sql (queued and failed rows without one)", outbox.DeadLetterExpiredSQL, []any{deadLetterArgs}},
		{"external_integration_conflicts_open_outbox_idx", "dead_letter_expired.sql (one open conflict per row)", outbox.DeadLetterExpiredSQL, []any{deadLetterArgs}},
		// The idle check probes each claim index as the sweep does, and the
		// waiting rows.
		{"external_integration_outbox_walk_unparked_idx", "idle.sql (an organization's queued and failed rows with a connection)", outbox.IdleSQL, []any{idleOrgArgs}},
		{"external_integration_outbox_claim_orphan_idx", "idle.sql (queued and failed rows without one)", outbox.IdleSQL, []any{idleArgs}},
		{"external_integration_outbox_connection_leased_idx", "idle.sql (leased rows)", outbox.IdleSQL, []any{idleArgs}},
		{"external_integration_outbox_follow_up_idx", "idle.sql (accepted rows)", outbox.IdleSQL, []any{idleArgs}},
		{"external_integration_outbox_waiting_idx", "idle.sql (waiting rows)", outbox.IdleSQL, []any{idleArgs}},
		{"external_integration_outbox_enqueue_key_idx", "integration_outbox_enqueue_existing (enqueued keys)", existingSQL, []any{org, "key-42"}},
		{"external_integration_outbox_legacy_key_idx", "integration_outbox_enqueue_existing (the host's older keys)", existingSQL, []any{org, "key-1042"}},
		{"external_integration_outbox_waiting_idx", "record.sql (the rows waiting for a row that ends)", outbox.RecordSQL, []any{recordArgs}},
	}
	// The claim's and the sweep's routines keep their generic plan
	// (plan_cache_mode = force_generic_plan): that plan must use the
	// index too, and so must the plan of a call planned with its arguments
	// (the plain statement, where the routine is missing).
	generic := map[string]bool{outbox.ClaimSQL: true, outbox.DeadLetterExpiredSQL: true}
	for _, c := range cases {
		t.Run(c.index+" "+c.statement, func(t *testing.T) {
			f.CheckPlanUses(t, c.index, c.statement, c.sql, c.args...)
			if generic[c.sql] {
				f.CheckGenericPlanUses(t, c.index, c.statement, c.sql, c.args...)
			}
		})
	}
}
