package outbox

// The statements whose plans outbox_test checks.
const (
	ClaimSQL             = claimSQL
	DeadLetterExpiredSQL = deadLetterExpiredSQL
)
