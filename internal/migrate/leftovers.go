package migrate

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OldWorkerGrace is how long after the install a row the old worker left in
// processing waits before the worker takes it over: long enough for a call
// the old worker still has in flight to end.
const OldWorkerGrace = 40 * time.Minute

// leftoverBatch bounds the rows one statement updates, so the install never
// holds many row locks for long.
const leftoverBatch = 500

// Leftovers is what the old worker left in processing, and what the install
// set on it.
type Leftovers struct {
	// Leased: rows with no lease and no provider status (the old worker was
	// calling the provider, or died doing so). Each now has a lease ending
	// OldWorkerGrace after the install; when it passes, the claim reclaims
	// the row like any expired lease.
	Leased int
	// FollowUps: rows the provider accepted (provider_status) with no
	// follow-up time. Each is now followed up OldWorkerGrace after the
	// install.
	FollowUps int
}

// leaseLeftoversSQL gives a batch of processing rows without a lease and
// without a provider status a lease ending $1 seconds from now. Rows the
// host has locked are skipped (the next make migrate takes them).
const leaseLeftoversSQL = `
with picked as (
    select id from external_integration_outbox
    where status = 'processing' and provider_status is null and lease_expires_at is null
    limit $2
    for update skip locked
)
update external_integration_outbox o
set lease_expires_at = now() + make_interval(secs => $1)
from picked where o.id = picked.id`

// followUpLeftoversSQL gives a batch of processing rows with a provider
// status and no follow-up time a follow-up $1 seconds from now.
const followUpLeftoversSQL = `
with picked as (
    select id from external_integration_outbox
    where status = 'processing' and provider_status is not null and next_attempt_at is null
    limit $2
    for update skip locked
)
update external_integration_outbox o
set next_attempt_at = now() + make_interval(secs => $1)
from picked where o.id = picked.id`

// RecoverLeftovers sets a lease or a follow-up time on every row the old
// worker left in processing without one, in batches of leftoverBatch rows,
// each its own transaction. It sets nothing else on the host's rows.
func RecoverLeftovers(ctx context.Context, conn *pgx.Conn) (Leftovers, error) {
	var out Leftovers
	for _, step := range []struct {
		name string
		sql  string
		n    *int
	}{
		{"leasing rows the old worker left in processing", leaseLeftoversSQL, &out.Leased},
		{"scheduling follow-ups of rows the old worker left accepted", followUpLeftoversSQL, &out.FollowUps},
	} {
		for {
			tag, err := conn.Exec(ctx, step.sql, OldWorkerGrace.Seconds(), leftoverBatch)
			if err != nil {
				return out, fmt.Errorf("%s: %w", step.name, err)
			}
			*step.n += int(tag.RowsAffected())
			if tag.RowsAffected() == 0 {
				break
			}
		}
	}
	return out, nil
}
