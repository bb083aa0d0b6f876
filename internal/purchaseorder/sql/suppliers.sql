-- Looks up the host's suppliers that a batch's purchase orders name in
-- place of an externalSupplierId, in one statement, run only for batches
-- that have such orders (load.sql stays as cheap as before for the others).
-- The arrays are parallel, one element per job: its outbox id (@outbox_ids),
-- organization (@organization_ids), connection (@connection_ids) and
-- provider (@providers), and the host's supplier id (@supplier_ids). For
-- each comes the contact or vendor a push_supplier of that supplier created
-- through the connection (integration_outbox_provider_documents), null when
-- there is none, and the newest push_supplier of it through the connection
-- still to be delivered (queued, failed or processing) with when it is due,
-- as {"id", "due"}, null when there is none.

select r.outbox_id,
    (select sd.external_id from integration_outbox_provider_documents sd
     where sd.integration_connection_id = r.connection_id and sd.local_entity_type = 'supplier'
       and sd.local_entity_id = r.supplier_id and sd.provider = r.provider),
    (select jsonb_build_object('id', w.id, 'due', w.next_attempt_at::timestamptz)
     from external_integration_outbox w
     where w.integration_connection_id = r.connection_id and w.local_entity_id = r.supplier_id
       and w.command_type = 'push_supplier' and w.status in ('queued', 'failed', 'processing')
       and w.organization_id = r.organization_id and w.local_entity_type = 'supplier'
     order by w.created_at desc
     limit 1)
from unnest(@outbox_ids::text[], @organization_ids::text[]::uuid[], @connection_ids::text[]::uuid[],
        @providers::text[], @supplier_ids::text[]::uuid[])
    as r(outbox_id, organization_id, connection_id, provider, supplier_id)
