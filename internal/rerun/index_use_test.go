package rerun_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/rerun"
)

// A rerun by filter reads the tenant index of the requeueable rows: on an
// outbox of 100k rows, mostly completed and queued, its plan uses it.
func TestRerunByFilterUsesTheRequeueableTenantIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDB(t)
	if _, err := f.Pool.Exec(ctx, `
		insert into external_integration_outbox (organization_id, status, created_at)
		select ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid,
		    case when g % 100 = 1 then 'failed' when g % 100 = 2 then 'dead_letter' when g % 100 = 3 then 'uncertain'
		         when g % 10 = 4 then 'queued' else 'completed' end,
		    now() - make_interval(secs => 100000 - g)
		from generate_series(1, 100000) g;
		analyze external_integration_outbox`); err != nil {
		t.Fatal(err)
	}
	const index = `"external_integration_outbox_org_requeueable_idx"`
	// Prepared, as pgx runs it: the custom plans of the first executions,
	// and the generic plan, which knows nothing of the statuses asked for.
	conn, err := f.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "prepare rerun_filter as "+rerun.SelectByFilterSQL); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "deallocate rerun_filter")
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		var plan string
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "set local plan_cache_mode = "+mode); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `explain (format json) execute rerun_filter('00000000-0000-4000-8000-000000000042',
				'{`+strings.Join(rerun.Requeueable, ",")+`}', null, null, null, null, 100)`).Scan(&plan)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, index) {
			t.Errorf("%s: the rerun's filter does not use %s:\n%s", mode, index, plan)
		}
	}
}
