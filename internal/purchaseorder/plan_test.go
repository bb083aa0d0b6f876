package purchaseorder_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/purchaseorder"
)

// The look-up of a supplier's push still to be delivered reads the
// supplier-push index (external_integration_outbox_supplier_push_idx), not
// the outbox: on 100k commands, 2,000 of them push_supplier.
func TestTheSupplierPushLookUpUsesItsIndex(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	if _, err := f.Pool.Exec(ctx, `
insert into integration_connections (id, organization_id, provider)
select ('00000000-0000-4000-9000-' || lpad(g::text, 12, '0'))::uuid,
    ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'xero'
from generate_series(0, 999) g;
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, idempotency_key, status, created_at)
select ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid,
    ('00000000-0000-4000-9000-' || lpad((g % 1000)::text, 12, '0'))::uuid, 'xero',
    case when g % 50 = 0 then 'push_supplier' else 'push_purchase_order' end,
    case when g % 50 = 0 then 'supplier' else 'purchase_order' end,
    gen_random_uuid(), 'key-' || g,
    case when g % 10 = 0 then 'queued' else 'completed' end, now() - make_interval(secs => 100000 - g)
from generate_series(1, 100000) g;
analyze external_integration_outbox; analyze integration_connections`); err != nil {
		t.Fatal(err)
	}
	n := 10
	ids, orgs, conns, providers, suppliers := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		ids[i], orgs[i], suppliers[i] = f.NewID(t), "00000000-0000-4000-8000-000000000001", f.NewID(t)
		conns[i], providers[i] = "00000000-0000-4000-9000-000000000001", "xero"
	}
	f.CheckPlanUses(t, "external_integration_outbox_supplier_push_idx", "purchaseorder/suppliers.sql (a supplier's push still to be delivered)",
		purchaseorder.SuppliersSQL, pgx.NamedArgs{"outbox_ids": ids, "organization_ids": orgs,
			"connection_ids": conns, "providers": providers, "supplier_ids": suppliers})
}
