package outbox

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/testenv/explain"
)

// ClaimPlan is the plan (EXPLAIN, format JSON) each claim statement runs
// with for p in tx, the scheduled claim's then the listed claim's (for p with
// its IDs, or with an empty list): its transaction set up as ClaimBatch sets
// it up (with setup false: as PostgreSQL would plan it otherwise), then the
// statement prepared and explained as one generic plan, as the functions run
// it.
func (s *Store) ClaimPlan(ctx context.Context, tx pgx.Tx, p ClaimParams, setup bool) (string, error) {
	if setup {
		if _, err := tx.Exec(ctx, claimSetupSQL, pgx.NamedArgs{"lock_key": claimLockKey}); err != nil {
			return "", err
		}
	} else if _, err := tx.Exec(ctx, "set local plan_cache_mode = force_generic_plan"); err != nil {
		return "", err
	}
	scheduled, listed := p, p
	scheduled.IDs = nil
	if listed.IDs == nil {
		listed.IDs = []string{}
	}
	var plans []string
	for _, p := range []ClaimParams{scheduled, listed} {
		plan, err := s.statementPlan(ctx, tx, claimStatement(p).SQL, s.claimArgs(p))
		if err != nil {
			return "", err
		}
		plans = append(plans, plan)
	}
	return strings.Join(plans, "\n"), nil
}

// statementPlan is the generic plan of sql with args in tx.
func (s *Store) statementPlan(ctx context.Context, tx pgx.Tx, sql string, args pgx.NamedArgs) (string, error) {
	return explainPrepared(ctx, tx, sql, args, "format json")
}

// explainPrepared prepares sql with args in tx and explains its execution
// with options (its lines joined): the plan the prepared statement runs.
func explainPrepared(ctx context.Context, tx pgx.Tx, sql string, args pgx.NamedArgs, options string) (string, error) {
	return explain.Prepared(ctx, tx, sql, args, options)
}

// The statements whose plans outbox_test checks.
var (
	ClaimSQL             = claimScheduled.SQL
	DeadLetterExpiredSQL = deadLetterExpired.SQL
	IdleSQL              = idleCheck.SQL
	RecordSQL            = record.SQL
)

// StartPlan is the generic plan (EXPLAIN ANALYZE, text) of the start for
// reqs in tx, as its routine runs it with plan_cache_mode
// force_generic_plan.
func (s *Store) StartPlan(ctx context.Context, tx pgx.Tx, reqs []StartRequest) (string, error) {
	if _, err := tx.Exec(ctx, "set local plan_cache_mode = force_generic_plan"); err != nil {
		return "", err
	}
	return explainPrepared(ctx, tx, start.SQL, startArgs(reqs), "analyze, buffers, costs off")
}

// RecordCompleted runs record_completed.sql for outcomes as Record would
// (their texts uncut); held: it recorded nothing, a connection of theirs
// having something a success clears.
func (s *Store) RecordCompleted(ctx context.Context, outcomes []Outcome) (Recorded, bool, error) {
	return s.recordCompleted(ctx, recordRows(outcomes))
}

// RecordsCompleted reports whether Record sends outcomes to
// record_completed.sql first.
func RecordsCompleted(outcomes []Outcome) bool { return allSucceeded(recordRows(outcomes)) }

func recordRows(outcomes []Outcome) []recordRow {
	rows := make([]recordRow, len(outcomes))
	for i, o := range outcomes {
		rows[i] = newRecordRow(o)
	}
	return rows
}
