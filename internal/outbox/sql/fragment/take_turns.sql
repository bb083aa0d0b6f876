-- Ends the candidates found outside the walk (rows without a connection,
-- expired leases, due follow-ups; each numbered by its turn within its
-- organization): at most the room, a turn of every organization in rotation
-- order (after @after_organization, wrapping around) before any
-- organization's next turn.
order by turn, organization_id <= @after_organization::uuid, organization_id, created_at
    limit (select room from budget)
