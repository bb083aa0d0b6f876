package purchaseorder

// loadSQL loads the purchase orders of a batch of started jobs in one
// statement: per job ($1 its outbox id), the order $3 of organization $2,
// and of location $4 when the job's connection has one (null: any
// location). A job whose order does not exist in that scope returns no
// row. The order's columns come out as they are named (document turns them
// into camelCase); its lines in their wire shape (docs/receivers.md), oldest
// first; and the provider's document an earlier push of the order created
// through the job's connection $5 of provider $6, null when there is none.
const loadSQL = `
select r.outbox_id, to_jsonb(p), coalesce((
        select jsonb_agg(jsonb_build_object(
            'id', l.id, 'stockItemId', l.stock_item_id, 'quantity', l.ordered_quantity,
            'unitCode', l.purchase_unit_code, 'normalizedUnitCode', l.normalized_unit_code,
            'unitsPerPurchaseUnit', l.units_per_purchase_unit_snapshot,
            'unitPriceMinor', l.unit_price_minor_snapshot) order by l.created_at, l.id)
        from purchase_order_lines l where l.purchase_order_id = p.id), '[]'::jsonb),
    d.external_id, d.sync_token
from unnest($1::text[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[], $5::text[]::uuid[], $6::text[])
    as r(outbox_id, organization_id, order_id, location_id, connection_id, provider)
join purchase_orders p
    on p.id = r.order_id and p.organization_id = r.organization_id
   and (r.location_id is null or p.location_id = r.location_id)
left join integration_outbox_provider_documents d
    on d.integration_connection_id = r.connection_id and d.local_entity_type = 'purchase_order'
   and d.local_entity_id = p.id and d.provider = r.provider`

// rememberSQL stores the provider's document of purchase order $2 through
// connection $1 of provider $3: its id $4 and sync token $5 (empty: none).
// The latest answer wins: pushes of one order run one at a time.
const rememberSQL = `
insert into integration_outbox_provider_documents as d
    (integration_connection_id, local_entity_type, local_entity_id, provider, external_id, sync_token, updated_at)
values ($1::uuid, 'purchase_order', $2::uuid, $3, $4, nullif($5, ''), now())
on conflict (integration_connection_id, local_entity_type, local_entity_id, provider) do update
set external_id = excluded.external_id, sync_token = excluded.sync_token, updated_at = excluded.updated_at`
