package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/pgtx"
)

// DeadLetteredMessage names the claim of a command message that reached
// the dead-letter queue.
type DeadLetteredMessage struct {
	OutboxID       string
	OrganizationID string
	ConnectionID   string
	ClaimToken     string
}

// ReleasedRow is a row ReleaseDeadLettered released, with its new status:
// failed (due now) or dead_letter (no attempts left).
type ReleasedRow struct {
	ID     string
	Status Status
}

// ReleaseDeadLettered releases, in one statement, the rows whose messages
// reached the dead-letter queue and are still those messages' claims (see
// sql/release_dead_lettered.sql): failed and due now with the attempt kept,
// or dead_letter with a conflict when attempt_count has reached maxAttempts.
// A message whose claim is no longer current (stale, repeated, started and
// still running, accepted by the provider) releases nothing.
func (s *Store) ReleaseDeadLettered(ctx context.Context, msgs []DeadLetteredMessage, maxAttempts int) ([]ReleasedRow, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(msgs))
	orgs := make([]string, len(msgs))
	tokens := make([]string, len(msgs))
	conns := make([]*string, len(msgs))
	for i, m := range msgs {
		ids[i], orgs[i], tokens[i], conns[i] = m.OutboxID, m.OrganizationID, m.ClaimToken, pgtx.Nullable(m.ConnectionID)
	}
	rows, err := s.db.Query(ctx, releaseDeadLetterSQL, pgx.NamedArgs{
		"ids": ids, "organization_ids": orgs, "claim_tokens": tokens, "connection_ids": conns,
		"max_attempts": maxAttempts,
		"events_on":    s.health.Events,
	})
	if err != nil {
		return nil, fmt.Errorf("releasing %d dead-lettered messages' rows: %w", len(msgs), err)
	}
	defer rows.Close()
	var out []ReleasedRow
	for rows.Next() {
		var r ReleasedRow
		var status string
		if err := rows.Scan(&r.ID, &status); err != nil {
			return nil, fmt.Errorf("releasing %d dead-lettered messages' rows: %w", len(msgs), err)
		}
		r.Status = Status(status)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("releasing %d dead-lettered messages' rows: %w", len(msgs), err)
	}
	return out, nil
}
