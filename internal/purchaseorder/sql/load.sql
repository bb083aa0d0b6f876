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
--
-- A job whose payload gives no externalSupplierId (@want_supplier) names the
-- host's supplier: payload_json.supplierId (@supplier_ids), else the order's
-- supplier_id when the host's table has one. For it come that supplier's id,
-- the contact or vendor a push_supplier of it created through the
-- connection (integration_outbox_provider_documents), and, when there is
-- none, the newest push_supplier of it through the connection still to be
-- delivered (queued, failed or processing) and when it is due.

select r.outbox_id, to_jsonb(p), coalesce((
        select jsonb_agg(jsonb_build_object(
            'id', l.id, 'stockItemId', l.stock_item_id, 'quantity', l.ordered_quantity,
            'unitCode', l.purchase_unit_code, 'normalizedUnitCode', l.normalized_unit_code,
            'unitsPerPurchaseUnit', l.units_per_purchase_unit_snapshot,
            'unitPriceMinor', l.unit_price_minor_snapshot) order by l.created_at, l.id)
        from purchase_order_lines l where l.purchase_order_id = p.id), '[]'::jsonb),
    d.external_id, d.sync_token,
    s.id, sd.external_id, sp.id::text, sp.next_attempt_at
from unnest(@outbox_ids::text[], @organization_ids::text[]::uuid[], @order_ids::text[]::uuid[],
        @location_ids::text[]::uuid[], @connection_ids::text[]::uuid[], @providers::text[],
        @want_supplier::bool[], @supplier_ids::text[])
    as r(outbox_id, organization_id, order_id, location_id, connection_id, provider, want_supplier, supplier_id)
join purchase_orders p
    on p.id = r.order_id and p.organization_id = r.organization_id
   and (r.location_id is null or p.location_id = r.location_id)
left join integration_outbox_provider_documents d
    on d.integration_connection_id = r.connection_id and d.local_entity_type = 'purchase_order'
   and d.local_entity_id = p.id and d.provider = r.provider
-- The host's supplier id, and as a uuid when it is one (local_entity_id of
-- a push_supplier is).
left join lateral (
    select x.id, case when x.id ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
        then x.id::uuid end as uuid
    from (select coalesce(r.supplier_id, to_jsonb(p) ->> 'supplier_id') as id) x
) s on r.want_supplier
left join integration_outbox_provider_documents sd
    on sd.integration_connection_id = r.connection_id and sd.local_entity_type = 'supplier'
   and sd.local_entity_id = s.uuid and sd.provider = r.provider
left join lateral (
    select w.id, w.next_attempt_at::timestamptz as next_attempt_at
    from external_integration_outbox w
    where w.integration_connection_id = r.connection_id and w.local_entity_id = s.uuid
      and w.command_type = 'push_supplier' and w.status in ('queued', 'failed', 'processing')
      and w.organization_id = r.organization_id and w.local_entity_type = 'supplier'
    order by w.created_at desc
    limit 1
) sp on sd.external_id is null
