package report

import (
	"context"
	"testing"

	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

// The operators' views that read rows of one organization use our indexes
// (by status too) on a loaded outbox: 100k rows over 1,000 organizations, mostly completed,
// and 20k conflicts.
func TestOperatorViewsUseOurIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	if _, err := f.Pool.Exec(ctx, `
		insert into integration_connections (id, organization_id, provider)
		select ('00000000-0000-4000-9000-' || lpad(g::text, 12, '0'))::uuid,
		    ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'sandbox'
		from generate_series(0, 999) g;
		insert into external_integration_outbox (id, organization_id, integration_connection_id, provider,
		    local_entity_type, local_entity_id, status, next_attempt_at, created_at)
		select ('00000000-0000-4000-a000-' || lpad(g::text, 12, '0'))::uuid,
		    ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid,
		    ('00000000-0000-4000-9000-' || lpad((g % 1000)::text, 12, '0'))::uuid, 'sandbox',
		    'purchase_order', gen_random_uuid(),
		    case when g % 50 = 0 then 'queued' when g % 100 = 1 then 'failed' when g % 100 = 2 then 'dead_letter'
		         else 'completed' end,
		    now() - interval '1 hour', now() - make_interval(secs => 100000 - g)
		from generate_series(1, 100000) g;
		insert into external_integration_conflicts (organization_id, conflict_type, outbox_id, status, created_at)
		select ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid, 'provider_rejected',
		    ('00000000-0000-4000-a000-' || lpad((g * 5)::text, 12, '0'))::uuid,
		    case when g % 10 = 0 then 'open' else 'resolved' end, now() - make_interval(secs => 20000 - g)
		from generate_series(1, 20000) g;
		analyze external_integration_outbox;
		analyze external_integration_conflicts;
		analyze integration_connections`); err != nil {
		t.Fatal(err)
	}
	org := "00000000-0000-4000-8000-000000000042"
	queuedRow := "00000000-0000-4000-a000-000000042050" // g = 42050: queued
	cases := []struct {
		index, view, sql string
		args             []any
	}{
		{"external_integration_outbox_org_requeueable_idx", "failed rows of an organization", failedSQL, []any{10, org, 50}},
		{"external_integration_outbox_walk_unparked_idx", "overdue queued rows of an organization", overdueQueuedSQL, []any{10, org, 300, 50}},
		{"external_integration_outbox_claim_orphan_idx", "overdue queued rows of an organization", overdueQueuedSQL, []any{10, org, 300, 50}},
		{"external_integration_outbox_entity_order_idx", "the command a row waits behind", waitingBehindSQL, []any{org, queuedRow}},
		{"external_integration_outbox_walk_unparked_idx", "the command a row waits behind", waitingBehindSQL, []any{org, queuedRow}},
		{"external_integration_outbox_walk_unparked_idx", "the list of an organization's queued rows", listSQL, []any{10, org, "queued", nil, 50}},
		{"external_integration_outbox_claim_orphan_idx", "the list of an organization's queued rows", listSQL, []any{10, org, "queued", nil, 50}},
		{"external_integration_outbox_org_requeueable_idx", "the list of an organization's dead-lettered rows", listSQL, []any{10, org, "dead_letter", nil, 50}},
		{"external_integration_conflicts_org_idx", "the conflicts of a row", conflictsSQL, []any{org, queuedRow}},
	}
	for _, c := range cases {
		t.Run(c.view, func(t *testing.T) {
			f.CheckPlanUses(t, c.index, c.view, c.sql, c.args...)
		})
	}
}
