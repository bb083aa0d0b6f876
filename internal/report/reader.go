// Package report is the operator's read-only view of the outbox: rows by
// status, organization and connection; one row with its attempts, conflicts
// and rerun history; and the deliveries that are stuck. infra/outboxctl prints it.
// Its SQL lives in sql/.
package report

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/config"
	"integration-outbox/internal/health"
	"integration-outbox/internal/pgtx"
)

// ErrNotFound is returned by Show when the organization has no such row.
var ErrNotFound = errors.New("report: outbox row not found for the organization")

// DB is what the reader needs of a pool.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Reader runs the read views.
type Reader struct {
	db          DB
	maxAttempts int
}

// New returns a reader; maxAttempts is MAX_ATTEMPTS (0: the default), used to
// show the attempts a row has left.
func New(db DB, maxAttempts int) *Reader {
	return &Reader{db: db, maxAttempts: cmp.Or(maxAttempts, config.DefaultMaxAttempts)}
}

// Row is an outbox row as the listings show it, its fields in the order of
// their columns (sql/list.sql).
type Row struct {
	ID             string
	OrganizationID string
	ConnectionID   string
	Provider       string
	CommandType    string
	Status         string
	AttemptCount   int
	// AttemptsLeft is MAX_ATTEMPTS minus AttemptCount (at least 0): a
	// queued or failed row with none left is never claimed.
	AttemptsLeft   int
	NextAttemptAt  *time.Time
	LeaseExpiresAt *time.Time
	ProviderStatus string
	LastError      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

func (r *Row) scanArgs() []any {
	return []any{&r.ID, &r.OrganizationID, &r.ConnectionID, &r.Provider, &r.CommandType, &r.Status,
		&r.AttemptCount, &r.AttemptsLeft, &r.NextAttemptAt, &r.LeaseExpiresAt, &r.ProviderStatus, &r.LastError,
		&r.CreatedAt, &r.UpdatedAt}
}

// ListParams filters a listing; empty fields do not filter.
type ListParams struct {
	OrganizationID string
	Status         string
	ConnectionID   string
	// Limit caps the rows returned (default 50).
	Limit int
}

// List returns rows newest first, and whether more rows matched than the
// limit allowed.
func (r *Reader) List(ctx context.Context, p ListParams) (rows []Row, more bool, err error) {
	limit := cmp.Or(p.Limit, 50)
	res, err := r.db.Query(ctx, listQuery, pgx.NamedArgs{"max_attempts": r.maxAttempts,
		"organization_id": pgtx.Nullable(p.OrganizationID), "status": pgtx.Nullable(p.Status),
		"connection_id": pgtx.Nullable(p.ConnectionID), "limit": limit + 1})
	if err != nil {
		return nil, false, fmt.Errorf("listing outbox rows: %w", err)
	}
	rows, err = pgx.CollectRows(res, pgx.RowToStructByPos[Row])
	if err != nil {
		return nil, false, fmt.Errorf("listing outbox rows: %w", err)
	}
	if len(rows) > limit {
		return rows[:limit], true, nil
	}
	return rows, false, nil
}

// Detail is one row with its history.
type Detail struct {
	// Columns is every column of the row in table order, each value as
	// JSON (null, a string, a number, an object...).
	Columns []Column
	// Attempts is the row's attempt history, oldest first.
	Attempts  []Attempt
	Conflicts []Conflict
	// History is the reruns that requeued or skipped the row, oldest first.
	History []RerunEntry
	// WaitingBehind is the command that holds the row (queued, failed, or
	// accepted awaiting its follow-up) back under per-entity order: another
	// command of its connection and entity in flight (for an accepted row:
	// leased, or accepted and older), or an older one still waiting. Empty
	// when nothing does.
	WaitingBehind string
}

// Column is one column of a row.
type Column struct {
	Name  string
	Value json.RawMessage
}

// Attempt is one recorded attempt of a row.
type Attempt struct {
	Attempt    int
	StartedAt  *time.Time
	FinishedAt *time.Time
	// Outcome is the status the attempt left the row in.
	Outcome string
	// ProviderCalled is false when the attempt ended before calling the
	// provider (unknown order, unsupported provider, rejected credential).
	ProviderCalled bool
	// HTTPStatus is the provider's last HTTP answer; nil without one.
	HTTPStatus        *int
	ErrorExcerpt      string
	ProviderReference string
	ProviderStatus    string
	// OutcomeUnknown: the attempt's call may have made the command's
	// document without our hearing of it; a later attempt looks it up
	// first.
	OutcomeUnknown bool
}

// Conflict is a conflict opened for a row.
type Conflict struct {
	ID               string
	ConflictType     string
	Severity         string
	Status           string
	Summary          string
	CreatedAt        time.Time
	ResolvedAt       *time.Time
	ResolutionReason string
}

// RerunEntry is one rerun audit row as it concerns one outbox row.
type RerunEntry struct {
	AuditID     string
	CreatedAt   time.Time
	RequestedBy string
	Reason      string
	DispatchNow bool
	// Requeued is set when the rerun requeued the row; otherwise SkipReason
	// says why it left it alone.
	Requeued   bool
	SkipReason string
}

// Show returns one row of the organization with its attempts, conflicts and
// rerun history, or ErrNotFound (also for another organization's row).
func (r *Reader) Show(ctx context.Context, organizationID, id string) (Detail, error) {
	var d Detail
	var doc []byte
	rowArgs := pgx.NamedArgs{"organization_id": organizationID, "id": id}
	err := r.db.QueryRow(ctx, showRowQuery, rowArgs).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("reading outbox row %s: %w", id, err)
	}
	if d.Columns, err = orderedColumns(doc); err != nil {
		return d, fmt.Errorf("reading outbox row %s: %w", id, err)
	}

	rows, err := r.db.Query(ctx, attemptsQuery, rowArgs)
	if err != nil {
		return d, fmt.Errorf("reading attempts of %s: %w", id, err)
	}
	d.Attempts, err = pgx.CollectRows(rows, pgx.RowToStructByName[Attempt])
	if err != nil {
		return d, fmt.Errorf("reading attempts of %s: %w", id, err)
	}

	rows, err = r.db.Query(ctx, conflictsQuery, rowArgs)
	if err != nil {
		return d, fmt.Errorf("reading conflicts of %s: %w", id, err)
	}
	d.Conflicts, err = pgx.CollectRows(rows, pgx.RowToStructByName[Conflict])
	if err != nil {
		return d, fmt.Errorf("reading conflicts of %s: %w", id, err)
	}

	rows, err = r.db.Query(ctx, historyQuery, rowArgs)
	if err != nil {
		return d, fmt.Errorf("reading rerun history of %s: %w", id, err)
	}
	d.History, err = pgx.CollectRows(rows, pgx.RowToStructByName[RerunEntry])
	if err != nil {
		return d, fmt.Errorf("reading rerun history of %s: %w", id, err)
	}
	err = r.db.QueryRow(ctx, waitingBehindQuery, rowArgs).Scan(&d.WaitingBehind)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("reading what %s waits behind: %w", id, err)
	}
	return d, nil
}

// orderedColumns splits a JSON object into its members, keeping their order.
func orderedColumns(doc []byte) ([]Column, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("row is not a JSON object")
	}
	var cols []Column
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		cols = append(cols, Column{Name: name, Value: v})
	}
	return cols, nil
}

// StuckParams bounds the stuck view; zero fields take their defaults.
type StuckParams struct {
	// OrganizationID, when set, shows only that organization's rows.
	OrganizationID string
	// AcceptedFor is how long an accepted row may wait on its provider
	// before it shows (default 1h).
	AcceptedFor time.Duration
	// OverdueFor is how long a queued row may stay due before it shows
	// (default 5m: the dispatch runs every minute).
	OverdueFor time.Duration
	// EntityWaitFor is how long the first command of an entity may wait
	// with others behind it before the entity shows (default 1h).
	EntityWaitFor time.Duration
	// Limit caps the rows of each section (default 50).
	Limit int
}

// Section is one kind of stuck row: up to the limit, and how many there
// are in all.
type Section struct {
	Total int
	Rows  []Row
}

// Stuck is what may need an operator.
type Stuck struct {
	// ExpiredLeases: processing rows whose lease expired before a result
	// was recorded; the next dispatch claims them again (or dead-letters
	// them when no attempts are left).
	ExpiredLeases Section
	// AcceptedWaiting: rows the provider accepted and has not finished for
	// longer than AcceptedFor. Nothing follows them up.
	AcceptedWaiting Section
	// OverdueQueued: queued rows due for longer than OverdueFor: the
	// scheduled dispatch is not taking them.
	OverdueQueued Section
	// Failed: rows waiting for their next attempt, soonest first.
	Failed Section
	// Circuits: connections whose circuit breaker is open or half-open, or
	// counting failures towards it.
	Circuits CircuitSection
	// OldWorker: rows the old worker left in processing, waiting for the
	// lease or follow-up time the install gave them.
	OldWorker LeftoverSection
	// EntitiesWaiting: entities whose first command has waited longer than
	// EntityWaitFor with other commands queued behind it (per-entity
	// order holds them until it ends).
	EntitiesWaiting EntitySection
	// Connections: connections disabled (their rows held until an operator
	// enables them), unauthorized (held until their credentials are
	// replaced) or failing (every call failing since FailingSince), with
	// since when and why, the longest-standing first, up to the limit.
	Connections []health.Connection
}

// EntitySection lists entities held up by their first command: up to the
// limit, and how many in all.
type EntitySection struct {
	Total    int
	Entities []EntityWait
}

// EntityWait is one entity whose commands wait behind its first one.
type EntityWait struct {
	EntityType string
	EntityID   string
	// Behind is how many of its commands wait behind Head.
	Behind int
	// Head is its first live command, the one the others wait for.
	Head Row
}

// LeftoverSection lists rows the old worker left: up to the limit, and how
// many in all.
type LeftoverSection struct {
	Total int
	Rows  []Leftover
}

// Leftover is a row the old worker left in processing.
type Leftover struct {
	Row
	// Kind is "lease" (no provider status: the install leased it) or
	// "follow_up" (accepted by the provider: the install set its follow-up).
	Kind string
	// Next says what will happen to the row, and NextAt when (null: the
	// install has not run since the row was left).
	Next   string
	NextAt *time.Time
}

// CircuitSection lists circuits: up to the limit, and how many in all.
type CircuitSection struct {
	Total    int
	Circuits []Circuit
}

// Circuit is one connection's circuit breaker.
type Circuit struct {
	ConnectionID   string
	OrganizationID string
	Provider       string
	// State is closed, open (rows held back until OpenUntil) or half-open
	// (one probe row at a time).
	State               string
	ConsecutiveFailures int
	// OpenedCount is how often it opened since it last closed.
	OpenedCount int
	OpenUntil   *time.Time
	OpenedAt    *time.Time
	// Waiting is how many of its rows are queued or failed.
	Waiting int
}

// Stuck returns the stuck view.
func (r *Reader) Stuck(ctx context.Context, p StuckParams) (Stuck, error) {
	limit := cmp.Or(p.Limit, 50)
	accepted := cmp.Or(p.AcceptedFor, time.Hour).Seconds()
	overdue := cmp.Or(p.OverdueFor, 5*time.Minute).Seconds()
	waitFor := cmp.Or(p.EntityWaitFor, time.Hour).Seconds()
	// Every stuck view takes these; each reads those it names.
	args := pgx.NamedArgs{"max_attempts": r.maxAttempts, "organization_id": pgtx.Nullable(p.OrganizationID),
		"limit": limit, "accepted_seconds": accepted, "overdue_seconds": overdue, "wait_seconds": waitFor}
	var s Stuck
	for _, q := range []struct {
		name string
		dst  *Section
		sql  string
	}{
		{"expired leases", &s.ExpiredLeases, expiredLeasesQuery},
		{"accepted rows", &s.AcceptedWaiting, acceptedWaitingQuery},
		{"overdue queued rows", &s.OverdueQueued, overdueQueuedQuery},
		{"failed rows", &s.Failed, failedQuery},
	} {
		rows, err := r.db.Query(ctx, q.sql, args)
		if err != nil {
			return s, fmt.Errorf("reading %s: %w", q.name, err)
		}
		q.dst.Rows, err = pgx.CollectRows(rows, func(cr pgx.CollectableRow) (Row, error) {
			var row Row
			err := cr.Scan(append(row.scanArgs(), &q.dst.Total)...)
			return row, err
		})
		if err != nil {
			return s, fmt.Errorf("reading %s: %w", q.name, err)
		}
	}
	rows, err := r.db.Query(ctx, circuitsQuery, args)
	if err != nil {
		return s, fmt.Errorf("reading circuits: %w", err)
	}
	s.Circuits.Circuits, err = pgx.CollectRows(rows, func(cr pgx.CollectableRow) (Circuit, error) {
		var c Circuit
		err := cr.Scan(&c.ConnectionID, &c.OrganizationID, &c.Provider, &c.State, &c.ConsecutiveFailures,
			&c.OpenedCount, &c.OpenUntil, &c.OpenedAt, &c.Waiting, &s.Circuits.Total)
		return c, err
	})
	if err != nil {
		return s, fmt.Errorf("reading circuits: %w", err)
	}
	rows, err = r.db.Query(ctx, entitiesWaitingQuery, args)
	if err != nil {
		return s, fmt.Errorf("reading entities waiting: %w", err)
	}
	s.EntitiesWaiting.Entities, err = pgx.CollectRows(rows, func(cr pgx.CollectableRow) (EntityWait, error) {
		var e EntityWait
		err := cr.Scan(append(append([]any{&e.EntityType, &e.EntityID, &e.Behind}, e.Head.scanArgs()...),
			&s.EntitiesWaiting.Total)...)
		return e, err
	})
	if err != nil {
		return s, fmt.Errorf("reading entities waiting: %w", err)
	}
	if s.Connections, err = health.List(ctx, r.db, p.OrganizationID, limit); err != nil {
		return s, fmt.Errorf("reading connections: %w", err)
	}
	rows, err = r.db.Query(ctx, oldWorkerQuery, args)
	if err != nil {
		return s, fmt.Errorf("reading the old worker's rows: %w", err)
	}
	s.OldWorker.Rows, err = pgx.CollectRows(rows, func(cr pgx.CollectableRow) (Leftover, error) {
		var l Leftover
		err := cr.Scan(append(l.scanArgs(), &l.Kind, &l.Next, &l.NextAt, &s.OldWorker.Total)...)
		return l, err
	})
	if err != nil {
		return s, fmt.Errorf("reading the old worker's rows: %w", err)
	}
	return s, nil
}
