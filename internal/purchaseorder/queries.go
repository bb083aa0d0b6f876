package purchaseorder

// loadSQL loads the purchase orders of a batch of started jobs in one
// statement: per job ($1 its outbox id), the order $3 of organization $2,
// and of location $4 when the job's connection has one (null: any
// location). A job whose order does not exist in that scope returns no
// row. The order's columns come out as they are named (document turns them
// into camelCase); its lines in their wire shape (docs/receivers.md), oldest first.
const loadSQL = `
select r.outbox_id, to_jsonb(p), coalesce((
        select jsonb_agg(jsonb_build_object(
            'id', l.id, 'stockItemId', l.stock_item_id, 'quantity', l.ordered_quantity,
            'unitCode', l.purchase_unit_code, 'normalizedUnitCode', l.normalized_unit_code,
            'unitsPerPurchaseUnit', l.units_per_purchase_unit_snapshot,
            'unitPriceMinor', l.unit_price_minor_snapshot) order by l.created_at, l.id)
        from purchase_order_lines l where l.purchase_order_id = p.id), '[]'::jsonb)
from unnest($1::text[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[])
    as r(outbox_id, organization_id, order_id, location_id)
join purchase_orders p
    on p.id = r.order_id and p.organization_id = r.organization_id
   and (r.location_id is null or p.location_id = r.location_id)`
