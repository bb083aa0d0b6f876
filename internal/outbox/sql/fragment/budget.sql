-- How many rows a claim may take: @claim_limit, less the leased rows in
-- flight beyond @max_in_flight across all organizations (0: no such cap).
-- Its leased rows are counted in the connection leased index, at most
-- @max_in_flight of them.

with budget as (
/*begin:budget*/
    select case when @max_in_flight::int > 0 then greatest(0, least(@claim_limit::int, @max_in_flight::int - (
            select count(*) from (
                select 1 from external_integration_outbox
                where status = 'processing' and provider_status is null and lease_expires_at > now()
                limit @max_in_flight::int) leased)::int))
        else @claim_limit::int end as room
/*end:budget*/
)
select room from budget
