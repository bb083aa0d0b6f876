-- Renders every column of the row @id of the organization @organization_id,
-- in table order (json, unlike jsonb, keeps the order).

select row_to_json(o)::text
from external_integration_outbox o
where o.organization_id = @organization_id::uuid and o.id = @id::uuid
