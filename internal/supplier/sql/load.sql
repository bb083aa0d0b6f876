-- Loads the contacts or vendors earlier pushes of a batch's suppliers
-- created or linked, in one statement. The arrays are parallel, one element
-- per job: its outbox id (@outbox_ids), the host's supplier (@supplier_ids),
-- the job's connection (@connection_ids) and its provider (@providers). A
-- job whose supplier has no document through that connection returns no
-- row. The supplier itself comes from the job's payload_json: no host table
-- is read.

select r.outbox_id, d.external_id, d.sync_token
from unnest(@outbox_ids::text[], @supplier_ids::text[]::uuid[], @connection_ids::text[]::uuid[], @providers::text[])
    as r(outbox_id, supplier_id, connection_id, provider)
join integration_outbox_provider_documents d
    on d.integration_connection_id = r.connection_id and d.local_entity_type = 'supplier'
   and d.local_entity_id = r.supplier_id and d.provider = r.provider
