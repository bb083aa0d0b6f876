-- Reads one row as the start hands it to its command, and writes nothing:
-- the preview (inspect's "preview", outboxctl preview) builds from it the
-- request the push would send now. Organization scoped: another
-- organization's row reads as no row. The same job as the start's
-- (fragment/job.sql); the claim token is the row's current one, if any.

with jobs as (
    select * from external_integration_outbox o
    where o.id = @id::text::uuid and o.organization_id = @organization_id::text::uuid
)
/*fragment:job*/ select null::text as id /*end:job*/
