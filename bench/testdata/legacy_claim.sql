with claim as (
select o.id,c.credential_reference,c.config_json,c.location_id
from external_integration_outbox o
join integration_connections c on c.id=o.integration_connection_id
where o.status in ('queued','failed')
and coalesce(o.next_attempt_at,now())<=now()
and o.attempt_count<10
order by o.created_at
limit $1
for update of o skip locked
)
update external_integration_outbox o
set status='processing',attempt_count=o.attempt_count+1
from claim
where o.id=claim.id
returning o.*,claim.credential_reference,claim.config_json,claim.location_id
