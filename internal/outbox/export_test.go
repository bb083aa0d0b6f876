package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ClaimPlan is the plan (EXPLAIN, format JSON) the claim runs with for p in
// tx: its transaction set up as ClaimBatch sets it up (with setup false: as
// PostgreSQL would plan it otherwise), then the claim prepared and
// explained as one generic plan, as the functions run it.
func (s *Store) ClaimPlan(ctx context.Context, tx pgx.Tx, p ClaimParams, setup bool) (string, error) {
	if setup {
		if _, err := tx.Exec(ctx, claimSetupSQL, pgx.NamedArgs{"lock_key": claimLockKey}); err != nil {
			return "", err
		}
	} else if _, err := tx.Exec(ctx, "set local plan_cache_mode = force_generic_plan"); err != nil {
		return "", err
	}
	sql, args, err := s.claimArgs(p).RewriteQuery(ctx, tx.Conn(), claimSQL, nil)
	if err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, "prepare claim_plan as "+sql); err != nil {
		return "", fmt.Errorf("preparing the claim: %w", err)
	}
	defer tx.Exec(context.WithoutCancel(ctx), "deallocate claim_plan")
	params := ""
	for i := range args {
		if i > 0 {
			params += ", "
		}
		params += fmt.Sprintf("$%d", i+1)
	}
	var plan string
	err = tx.QueryRow(ctx, "explain (format json) execute claim_plan("+params+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&plan)
	return plan, err
}

// The statements whose plans outbox_test checks.
var (
	ClaimSQL             = claimSQL
	DeadLetterExpiredSQL = deadLetterExpiredSQL
)
