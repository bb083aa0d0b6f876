// Package rerun is the operator's rerun: a validated, tenant-scoped requeue
// of failed, dead_letter and uncertain outbox rows, with their open
// conflicts resolved and one audit row per rerun, optionally followed by one
// dispatch of exactly the requeued rows. functions/rerun serves it to the
// Lambda console and infra/outboxctl runs it locally. Its SQL lives in
// sql/.
package rerun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/config"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/health"
	"integration-outbox/internal/logging"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/strictjson"
)

// Skip reasons, one per row the rerun leaves alone.
const (
	ReasonNotFound = "not found"
	// ReasonConnectionNotFound: enableConnection names no connection of
	// the organization.
	ReasonConnectionNotFound = "connection not found"
	ReasonCompleted          = "completed"
	ReasonProcessing         = "processing: in flight"
	ReasonUnsupported        = "unsupported"
	ReasonQueued             = "already queued"
	ReasonNoAttemptsLeft     = "no attempts left; set resetAttempts"
	// ReasonChanged is only reported if a row changed between the locking
	// read and the requeue, which the lock rules out.
	ReasonChanged = "changed during the rerun"
)

// Dispatcher runs one dispatch (a *dispatch.Dispatcher).
type Dispatcher interface {
	Run(ctx context.Context, req dispatch.Request) (dispatch.Summary, error)
}

// Config configures a Rerunner.
type Config struct {
	// MaxAttempts is MAX_ATTEMPTS: without resetAttempts, a row that used
	// them all is skipped (the claim would never take it).
	MaxAttempts int
	Logger      *slog.Logger
}

// Rerunner runs reruns.
type Rerunner struct {
	db         pgtx.Beginner
	dispatcher Dispatcher
	cfg        Config
}

// New returns a rerunner. dispatcher may be nil: a rerun asking for
// dispatchNow is then refused before anything is changed.
func New(db pgtx.Beginner, dispatcher Dispatcher, cfg Config) (*Rerunner, error) {
	if db == nil {
		return nil, errors.New("rerun: no database")
	}
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("rerun: MaxAttempts must not be negative, got %d", cfg.MaxAttempts)
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, config.DefaultMaxAttempts)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Rerunner{db: db, dispatcher: dispatcher, cfg: cfg}, nil
}

// Result is a rerun's output (contract). Requeued and Skipped are never nil.
type Result struct {
	DryRun bool `json:"dryRun"`
	// Matched counts the rows of the organization the ids or the filter
	// selected (ids not found are not matched).
	Matched int `json:"matched"`
	// Requeued lists the rows put back to queued (in a dry run: the rows
	// that would be), in the order of outboxIds or oldest first.
	Requeued []string `json:"requeued"`
	Skipped  []Skip   `json:"skipped"`
	// Dispatched counts the messages sent by dispatchNow.
	Dispatched int `json:"dispatched"`
	// EnabledConnection is what an enableConnection payload did.
	EnabledConnection *EnabledConnection `json:"enabledConnection,omitempty"`
}

// EnabledConnection is the outcome of an enableConnection payload.
type EnabledConnection struct {
	ConnectionID string `json:"connectionId"`
	// WasDisabled is false when the connection was not disabled: nothing
	// changed (the audit row still records the request).
	WasDisabled bool `json:"wasDisabled"`
	// DisabledAt is when it had been disabled.
	DisabledAt *time.Time `json:"disabledAt,omitempty"`
	// MadeDue counts its held rows made due at once.
	MadeDue int `json:"madeDue"`
}

// Skip is a row the rerun left alone, and why.
type Skip struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Handle is the Lambda entry point: it parses the payload and runs it. A bad
// payload is an error naming the field, and nothing is changed.
func (r *Rerunner) Handle(ctx context.Context, raw json.RawMessage) (Result, error) {
	req, err := Parse(raw)
	if err != nil {
		return Result{}, err
	}
	return r.Run(ctx, req)
}

// Run requeues what req selects in one transaction (the audit row
// included), then, with DispatchNow, runs one dispatch limited to the
// requeued rows. A dry run reads in a read-only transaction and writes
// nothing.
func (r *Rerunner) Run(ctx context.Context, req Request) (Result, error) {
	if req.DispatchNow && r.dispatcher == nil {
		return Result{}, fmt.Errorf("rerun payload: %w", strictjson.Fieldf("dispatchNow",
			"cannot dispatch from here: no command queue is configured (PUSH_PURCHASE_ORDER_QUEUE_URL)"))
	}
	log := logging.ForRequest(ctx, r.cfg.Logger).With("organizationId", req.OrganizationID)
	var (
		res     Result
		txStats stats
		err     error
	)
	// A deadlock with a concurrent record or rerun rolls the whole
	// transaction back; trying again is safe.
	for attempt := 1; ; attempt++ {
		res, txStats, err = r.requeue(ctx, req)
		if err == nil || attempt == 3 || !retryable(err) {
			break
		}
		log.WarnContext(ctx, "rerun transaction aborted; trying again", "attempt", attempt, "error", err.Error())
	}
	if err != nil {
		return Result{}, err
	}
	if req.DispatchNow && !req.DryRun && len(res.Requeued) > 0 {
		sum, derr := r.dispatcher.Run(ctx, dispatch.Request{
			Limit: len(res.Requeued), OrganizationID: req.OrganizationID, IDs: res.Requeued,
		})
		res.Dispatched = sum.Dispatched
		if derr != nil {
			err = fmt.Errorf("rerun committed (%d rows requeued, audit %s) but dispatchNow failed; "+
				"the scheduled dispatch will send them: %w", len(res.Requeued), txStats.auditID, derr)
		}
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
	}
	log.Log(ctx, level, "rerun finished", "requestedBy", req.RequestedBy, "reason", req.Reason,
		"dryRun", res.DryRun, "matched", res.Matched, "requeued", len(res.Requeued), "skipped", len(res.Skipped),
		"conflictsResolved", txStats.conflictsResolved, "dispatched", res.Dispatched, "auditId", txStats.auditID,
		"enableConnection", req.EnableConnection, "wasDisabled", res.EnabledConnection != nil && res.EnabledConnection.WasDisabled,
		"error", errString(err))
	return res, err
}

type stats struct {
	auditID           string
	conflictsResolved int64
}

// candidate is a selected row, as much of it as the rerun needs to decide.
type candidate struct {
	ID           string
	Status       string
	AttemptCount int
}

func (r *Rerunner) requeue(ctx context.Context, req Request) (res Result, st stats, err error) {
	opts := pgx.TxOptions{}
	if req.DryRun {
		opts.AccessMode = pgx.ReadOnly
	}
	err = pgtx.Do(ctx, r.db, opts, func(tx pgx.Tx) error {
		var err error
		res, st, err = r.requeueIn(ctx, tx, req)
		return err
	})
	if err != nil {
		return Result{}, stats{}, fmt.Errorf("rerun: %w", err)
	}
	return res, st, nil
}

// requeueIn does the rerun's work in tx: read (and lock) the candidates,
// requeue the planned rows, resolve their conflicts and write the audit row.
// A dry run stops after the reading.
func (r *Rerunner) requeueIn(ctx context.Context, tx pgx.Tx, req Request) (res Result, st stats, err error) {
	if req.EnableConnection != "" {
		return r.enableIn(ctx, tx, req)
	}
	cands, err := r.candidates(ctx, tx, req)
	if err != nil {
		return res, st, err
	}
	plan, skipped := r.decide(req, cands)
	res = Result{DryRun: req.DryRun, Matched: len(cands), Requeued: []string{}, Skipped: skipped}
	if req.DryRun {
		res.Requeued = append(res.Requeued, plan...)
		return res, st, nil
	}

	rows, err := tx.Query(ctx, requeueSQL, pgx.NamedArgs{"organization_id": req.OrganizationID, "ids": plan,
		"reset_attempts": req.ResetAttempts, "max_attempts": r.cfg.MaxAttempts})
	if err != nil {
		return res, st, fmt.Errorf("requeueing %d rows: %w", len(plan), err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, st, fmt.Errorf("requeueing %d rows: %w", len(plan), err)
	}
	requeued := make(map[string]bool, len(done))
	for _, id := range done {
		requeued[id] = true
	}
	for _, id := range plan {
		if requeued[id] {
			res.Requeued = append(res.Requeued, id)
		} else {
			res.Skipped = append(res.Skipped, Skip{ID: id, Reason: ReasonChanged})
		}
	}

	if len(res.Requeued) > 0 {
		tag, err := tx.Exec(ctx, resolveConflictsSQL, pgx.NamedArgs{"organization_id": req.OrganizationID,
			"ids": res.Requeued, "reason": req.Reason})
		if err != nil {
			return res, st, fmt.Errorf("resolving conflicts: %w", err)
		}
		st.conflictsResolved = tag.RowsAffected()
	}

	doc, err := req.auditPayload()
	if err != nil {
		return res, st, err
	}
	skippedDoc, err := json.Marshal(res.Skipped)
	if err != nil {
		return res, st, fmt.Errorf("encoding skipped rows: %w", err)
	}
	if err := tx.QueryRow(ctx, insertAuditSQL, auditArgs(req, doc, res.Requeued, skippedDoc, req.DispatchNow)).
		Scan(&st.auditID); err != nil {
		return res, st, fmt.Errorf("writing the audit row: %w", err)
	}
	return res, st, nil
}

// enableIn enables the request's connection in tx and writes the audit row.
// A connection of another organization is not found, like one that does not
// exist: an answer, not an error (as an outbox id the organization does not
// have), so that an operator's typo does not trip the function's Errors
// alarm. The connection is then reported skipped, "connection not found",
// with no enabledConnection, and nothing but the audit row is written.
func (r *Rerunner) enableIn(ctx context.Context, tx pgx.Tx, req Request) (res Result, st stats, err error) {
	e, err := health.Enable(ctx, tx, req.OrganizationID, req.EnableConnection)
	switch {
	case errors.Is(err, health.ErrNoConnection):
		res = Result{Requeued: []string{}, Skipped: []Skip{{ID: req.EnableConnection, Reason: ReasonConnectionNotFound}}}
	case err != nil:
		return res, st, err
	default:
		enabled := &EnabledConnection{ConnectionID: req.EnableConnection, WasDisabled: !e.DisabledAt.IsZero(), MadeDue: e.MadeDue}
		if enabled.WasDisabled {
			at := e.DisabledAt.UTC()
			enabled.DisabledAt = &at
		}
		res = Result{Requeued: []string{}, Skipped: []Skip{}, EnabledConnection: enabled}
	}
	doc, err := req.auditPayload()
	if err != nil {
		return res, st, err
	}
	skippedDoc, err := json.Marshal(res.Skipped)
	if err != nil {
		return res, st, fmt.Errorf("encoding skipped rows: %w", err)
	}
	if err := tx.QueryRow(ctx, insertAuditSQL, auditArgs(req, doc, res.Requeued, skippedDoc, false)).
		Scan(&st.auditID); err != nil {
		return res, st, fmt.Errorf("writing the audit row: %w", err)
	}
	return res, st, nil
}

// auditArgs are the arguments of the audit row of the rerun req.
func auditArgs(req Request, payload []byte, requeued []string, skipped []byte, dispatchNow bool) pgx.NamedArgs {
	return pgx.NamedArgs{"organization_id": req.OrganizationID, "requested_by": pgtx.Nullable(req.RequestedBy),
		"reason": req.Reason, "payload": payload, "affected_ids": requeued, "skipped": skipped,
		"dispatch_now": dispatchNow}
}

// candidates reads the selected rows of the organization; a real rerun
// locks them until it commits.
func (r *Rerunner) candidates(ctx context.Context, tx pgx.Tx, req Request) ([]candidate, error) {
	byIDs, byFilter := lockByIDsSQL, lockByFilterSQL
	if req.DryRun {
		byIDs, byFilter = selectByIDsSQL, selectByFilterSQL
	}
	var (
		rows pgx.Rows
		err  error
	)
	if req.Filter == nil {
		rows, err = tx.Query(ctx, byIDs, pgx.NamedArgs{"organization_id": req.OrganizationID, "ids": req.OutboxIDs})
	} else {
		f := req.Filter
		rows, err = tx.Query(ctx, byFilter, pgx.NamedArgs{"organization_id": req.OrganizationID,
			"statuses": f.Statuses, "connection_id": pgtx.Nullable(f.ConnectionID),
			"command_type": pgtx.Nullable(f.CommandType), "created_after": pgtx.NullableTime(f.CreatedAfter),
			"created_before": pgtx.NullableTime(f.CreatedBefore), "limit": req.Limit})
	}
	if err != nil {
		return nil, fmt.Errorf("selecting rows: %w", err)
	}
	cands, err := pgx.CollectRows(rows, pgx.RowToStructByName[candidate])
	if err != nil {
		return nil, fmt.Errorf("selecting rows: %w", err)
	}
	return cands, nil
}

// decide splits the candidates into the rows to requeue and the skipped
// ones. With outboxIds the result follows their order, and an id that is
// not among the candidates (absent, or another organization's) is "not
// found".
func (r *Rerunner) decide(req Request, cands []candidate) (requeue []string, skipped []Skip) {
	requeue, skipped = []string{}, []Skip{}
	byID := make(map[string]candidate, len(cands))
	order := make([]string, 0, len(cands))
	for _, c := range cands {
		byID[c.ID] = c
		order = append(order, c.ID)
	}
	if req.Filter == nil {
		order = req.OutboxIDs
	}
	for _, id := range order {
		c, ok := byID[id]
		if !ok {
			skipped = append(skipped, Skip{ID: id, Reason: ReasonNotFound})
			continue
		}
		if reason := r.skipReason(req, c); reason != "" {
			skipped = append(skipped, Skip{ID: id, Reason: reason})
			continue
		}
		requeue = append(requeue, id)
	}
	return requeue, skipped
}

func (r *Rerunner) skipReason(req Request, c candidate) string {
	switch outbox.Status(c.Status) {
	case outbox.StatusFailed, outbox.StatusDeadLetter, outbox.StatusUncertain:
		if !req.ResetAttempts && c.AttemptCount >= r.cfg.MaxAttempts {
			return ReasonNoAttemptsLeft
		}
		return ""
	case outbox.StatusCompleted:
		return ReasonCompleted
	case outbox.StatusProcessing:
		return ReasonProcessing
	case outbox.StatusUnsupported:
		return ReasonUnsupported
	case outbox.StatusQueued:
		return ReasonQueued
	}
	return fmt.Sprintf("status %q is not requeueable", c.Status)
}

// retryable reports a transaction the database aborted to break a deadlock
// or a serialization conflict.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
