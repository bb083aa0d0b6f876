-- Loads the purchase orders of a batch of started jobs in one statement. The
-- arrays are parallel, one element per job: its outbox id (@outbox_ids), the
-- order (@order_ids) of its organization (@organization_ids), and of the
-- location of its connection (@location_ids) when the connection has one
-- (null: any location). A job whose order does not exist in that scope
-- returns no row. The order's columns come out as they are named (document
-- turns them into camelCase); its lines in their wire shape
-- (docs/receivers.md), oldest first; and the provider's document an earlier
-- push of the order created through the job's connection (@connection_ids)
-- of its provider (@providers), null when there is none.

select r.outbox_id, to_jsonb(p), coalesce((
        select jsonb_agg(jsonb_build_object(
            'id', l.id, 'stockItemId', l.stock_item_id, 'quantity', l.ordered_quantity,
            'unitCode', l.purchase_unit_code, 'normalizedUnitCode', l.normalized_unit_code,
            'unitsPerPurchaseUnit', l.units_per_purchase_unit_snapshot,
            'unitPriceMinor', l.unit_price_minor_snapshot) order by l.created_at, l.id)
        from purchase_order_lines l where l.purchase_order_id = p.id), '[]'::jsonb),
    d.external_id, d.sync_token
from unnest(@outbox_ids::text[], @organization_ids::text[]::uuid[], @order_ids::text[]::uuid[],
        @location_ids::text[]::uuid[], @connection_ids::text[]::uuid[], @providers::text[])
    as r(outbox_id, organization_id, order_id, location_id, connection_id, provider)
join purchase_orders p
    on p.id = r.order_id and p.organization_id = r.organization_id
   and (r.location_id is null or p.location_id = r.location_id)
left join integration_outbox_provider_documents d
    on d.integration_connection_id = r.connection_id and d.local_entity_type = 'purchase_order'
   and d.local_entity_id = p.id and d.provider = r.provider
