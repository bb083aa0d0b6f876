// Package inspect is the console's read-only view of the outbox: one row
// with its attempts, conflicts and reruns, or the stuck view, always of one
// organization. functions/inspect serves it; it reads through
// internal/report, so the console and outboxctl show the same thing.
package inspect

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/health"
	"integration-outbox/internal/logging"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/push"
	"integration-outbox/internal/report"
)

// Config configures an Inspector.
type Config struct {
	MaxAttempts int // MAX_ATTEMPTS, to show the attempts a row has left
	Logger      *slog.Logger
	// Previewer answers "preview" (nil: a preview request is an error).
	Previewer Previewer
}

// Previewer works out, in the inspection's read-only transaction, what the
// push of a row would send now (a *push.Previewer).
type Previewer interface {
	Preview(ctx context.Context, tx pgx.Tx, organizationID, outboxID string) (push.Preview, error)
}

// Inspector answers inspection payloads.
type Inspector struct {
	db  pgtx.Beginner
	cfg Config
}

// New returns an inspector reading through db.
func New(db pgtx.Beginner, cfg Config) *Inspector {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Inspector{db: db, cfg: cfg}
}

// Handle answers one console payload. A bad payload is an error naming the
// field; a row the organization does not have is an answer (found false),
// not an error, so that a typo does not count as a function error.
func (i *Inspector) Handle(ctx context.Context, raw json.RawMessage) (Response, error) {
	req, err := Parse(raw)
	if err != nil {
		return Response{}, err
	}
	return i.Run(ctx, req)
}

// Run answers a validated request.
func (i *Inspector) Run(ctx context.Context, req Request) (Response, error) {
	log := logging.ForRequest(ctx, i.cfg.Logger).With("organizationId", req.OrganizationID)
	resp := Response{OrganizationID: req.OrganizationID}
	err := i.readOnly(ctx, func(tx pgx.Tx) error {
		r := report.New(tx, i.cfg.MaxAttempts)
		if req.Stuck {
			s, err := r.Stuck(ctx, report.StuckParams{OrganizationID: req.OrganizationID, Limit: req.Limit})
			if err != nil {
				return err
			}
			resp.Stuck = stuckView(s)
			return nil
		}
		resp.OutboxID = req.OutboxID
		d, err := r.Show(ctx, req.OrganizationID, req.OutboxID)
		if errors.Is(err, report.ErrNotFound) {
			resp.Message = fmt.Sprintf("outbox row %s not found for organization %s", req.OutboxID, req.OrganizationID)
			return nil
		}
		if err != nil {
			return err
		}
		resp.Found = true
		resp.Row, err = rowObject(d.Columns)
		if err != nil {
			return fmt.Errorf("rendering outbox row %s: %w", req.OutboxID, err)
		}
		resp.Attempts, resp.Conflicts, resp.Reruns = attemptsView(d.Attempts), conflictsView(d.Conflicts), rerunsView(d.History)
		if d.WaitingBehind != "" {
			resp.WaitingBehind = d.WaitingBehind
			resp.Message = fmt.Sprintf("waiting behind %s: commands of one connection and entity go one at a time, "+
				"oldest first; this one is claimed once that one ends", d.WaitingBehind)
		}
		if w := waitingFor(d.Columns); w != "" {
			resp.WaitingFor = w
			resp.Message = fmt.Sprintf("waiting for %s: this command depends on that one (a purchase order on its "+
				"supplier's push_supplier); it goes once that one ends, no attempt used", w)
		}
		if req.Preview {
			return i.preview(ctx, tx, req, &resp)
		}
		return nil
	})
	if err != nil {
		log.ErrorContext(ctx, "inspection failed", "outboxId", req.OutboxID, "stuck", req.Stuck, "error", err.Error())
		return Response{}, fmt.Errorf("inspecting the outbox: %w", err)
	}
	log.InfoContext(ctx, "inspection answered", "outboxId", req.OutboxID, "stuck", req.Stuck, "found", resp.Found)
	return resp, nil
}

// preview adds to resp the request the push of the row would send now. It
// reads in the inspection's read-only transaction, calls no provider and
// reads no secret.
func (i *Inspector) preview(ctx context.Context, tx pgx.Tx, req Request, resp *Response) error {
	if i.cfg.Previewer == nil {
		return errors.New("preview: this inspector was built without a previewer")
	}
	pv, err := i.cfg.Previewer.Preview(ctx, tx, req.OrganizationID, req.OutboxID)
	if err != nil {
		return fmt.Errorf("previewing outbox row %s: %w", req.OutboxID, err)
	}
	resp.Preview = &pv
	return nil
}

// waitingFor is the row's waiting_for_outbox_id while the row is failed
// (waiting); empty otherwise.
func waitingFor(cols []report.Column) string {
	var status, waiting string
	for _, c := range cols {
		switch c.Name {
		case "status":
			json.Unmarshal(c.Value, &status)
		case "waiting_for_outbox_id":
			json.Unmarshal(c.Value, &waiting)
		}
	}
	if status != "failed" {
		return ""
	}
	return waiting
}

// readOnly runs fn in a read-only transaction: the function's database user
// may write (it is the one the other functions use), so read-only is
// enforced by PostgreSQL here, not by IAM.
func (i *Inspector) readOnly(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgtx.Do(ctx, i.db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, fn)
}

// rowObject renders the row's columns as one JSON object in table order.
func rowObject(cols []report.Column) (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for n, c := range cols {
		if n > 0 {
			b.WriteByte(',')
		}
		name, err := json.Marshal(c.Name)
		if err != nil {
			return nil, err
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(c.Value)
	}
	b.WriteByte('}')
	if !json.Valid(b.Bytes()) {
		return nil, errors.New("row is not valid JSON")
	}
	return b.Bytes(), nil
}

// Response is the answer to the console. For an outbox id: Found, and when
// found the row with its attempts, conflicts and reruns, and WaitingBehind
// (with a Message saying so) when per-entity order holds it behind another
// command; otherwise Message says what was not found. For the stuck view:
// Stuck.
type Response struct {
	OrganizationID string          `json:"organizationId"`
	OutboxID       string          `json:"outboxId,omitempty"`
	Found          bool            `json:"found"`
	Message        string          `json:"message,omitempty"`
	Row            json.RawMessage `json:"row,omitzero"`
	Attempts       []Attempt       `json:"attempts,omitzero"`
	Conflicts      []Conflict      `json:"conflicts,omitzero"`
	Reruns         []Rerun         `json:"reruns,omitzero"`
	WaitingBehind  string          `json:"waitingBehind,omitempty"`
	// WaitingFor is the command a failed row waits for (its dependency: a
	// purchase order's supplier push), its attempt not charged; the row is
	// due once that one ends.
	WaitingFor string `json:"waitingFor,omitempty"`
	Stuck      *Stuck `json:"stuck,omitempty"`
	// Preview is the request the push would send now, or its refusal
	// (requested with "preview": true).
	Preview *push.Preview `json:"preview,omitempty"`
}

// Attempt is one recorded attempt of the row.
type Attempt struct {
	Attempt           int        `json:"attempt"`
	StartedAt         *time.Time `json:"startedAt"`
	FinishedAt        *time.Time `json:"finishedAt"`
	Outcome           string     `json:"outcome"`
	ProviderCalled    bool       `json:"providerCalled"`
	HTTPStatus        *int       `json:"httpStatus"`
	Error             string     `json:"error,omitempty"`
	ProviderReference string     `json:"providerReference,omitempty"`
	ProviderStatus    string     `json:"providerStatus,omitempty"`
	// OutcomeUnknown: the attempt's call may have made the command's
	// document without our hearing of it (docs/reliability.md).
	OutcomeUnknown bool `json:"outcomeUnknown,omitempty"`
}

// Conflict is a conflict opened for the row.
type Conflict struct {
	ID               string     `json:"id"`
	ConflictType     string     `json:"conflictType"`
	Severity         string     `json:"severity"`
	Status           string     `json:"status"`
	Summary          string     `json:"summary"`
	CreatedAt        time.Time  `json:"createdAt"`
	ResolvedAt       *time.Time `json:"resolvedAt"`
	ResolutionReason string     `json:"resolutionReason,omitempty"`
}

// Rerun is a rerun that requeued the row, or skipped it (SkipReason).
type Rerun struct {
	AuditID     string    `json:"auditId"`
	CreatedAt   time.Time `json:"createdAt"`
	RequestedBy string    `json:"requestedBy,omitempty"`
	Reason      string    `json:"reason"`
	DispatchNow bool      `json:"dispatchNow"`
	Requeued    bool      `json:"requeued"`
	SkipReason  string    `json:"skipReason,omitempty"`
}

// Stuck is `outboxctl stuck` for one organization.
type Stuck struct {
	ExpiredLeases   Section `json:"expiredLeases"`
	AcceptedWaiting Section `json:"acceptedWaiting"`
	OverdueQueued   Section `json:"overdueQueued"`
	Failed          Section `json:"failed"`
	// OldWorker: rows the old worker left in processing, with what the
	// dispatch will do to each and when.
	OldWorker LeftoverSection `json:"oldWorker"`
	// EntitiesWaiting counts the entities whose first command has waited
	// over an hour with others queued behind it.
	EntitiesWaiting EntitySection `json:"entitiesWaiting"`
	// Connections lists the organization's connections that are disabled,
	// unauthorized or failing, with since when and why (state, since,
	// failingSince, lastFailureAt, reason, waiting rows).
	Connections []health.Connection `json:"connections"`
}

// EntitySection is the entities held up by their first command: how many
// in all, and up to the limit.
type EntitySection struct {
	Total    int          `json:"total"`
	Entities []EntityWait `json:"entities"`
}

// EntityWait is one entity whose commands wait behind its first one (head).
type EntityWait struct {
	EntityType string `json:"entityType"`
	EntityID   string `json:"entityId"`
	Behind     int    `json:"behind"`
	Head       Row    `json:"head"`
}

// LeftoverSection lists rows the old worker left: how many in all, and up
// to the limit.
type LeftoverSection struct {
	Total int        `json:"total"`
	Rows  []Leftover `json:"rows"`
}

// Leftover is a row the old worker left in processing: kind "lease" (no
// provider status) or "follow_up" (accepted by the provider); next says
// what the dispatch will do, nextAt when (null: make migrate has not run
// since the row was left).
type Leftover struct {
	Row
	Kind   string     `json:"kind"`
	Next   string     `json:"next"`
	NextAt *time.Time `json:"nextAt"`
}

// Section is one kind of stuck row: how many in all, and up to the limit.
type Section struct {
	Total int   `json:"total"`
	Rows  []Row `json:"rows"`
}

// Row is a row of the stuck view.
type Row struct {
	ID             string     `json:"id"`
	ConnectionID   string     `json:"connectionId,omitempty"`
	Provider       string     `json:"provider,omitempty"`
	CommandType    string     `json:"commandType,omitempty"`
	Status         string     `json:"status"`
	AttemptCount   int        `json:"attemptCount"`
	AttemptsLeft   int        `json:"attemptsLeft"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt"`
	ProviderStatus string     `json:"providerStatus,omitempty"`
	LastError      string     `json:"lastError,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	UpdatedAt      time.Time  `json:"updatedAt"`
}

func attemptsView(in []report.Attempt) []Attempt {
	out := make([]Attempt, len(in))
	for n, a := range in {
		out[n] = Attempt{Attempt: a.Attempt, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Outcome: a.Outcome,
			ProviderCalled: a.ProviderCalled, HTTPStatus: a.HTTPStatus, Error: a.ErrorExcerpt,
			ProviderReference: a.ProviderReference, ProviderStatus: a.ProviderStatus, OutcomeUnknown: a.OutcomeUnknown}
	}
	return out
}

func conflictsView(in []report.Conflict) []Conflict {
	out := make([]Conflict, len(in))
	for n, c := range in {
		out[n] = Conflict{ID: c.ID, ConflictType: c.ConflictType, Severity: c.Severity, Status: c.Status,
			Summary: c.Summary, CreatedAt: c.CreatedAt, ResolvedAt: c.ResolvedAt, ResolutionReason: c.ResolutionReason}
	}
	return out
}

func rerunsView(in []report.RerunEntry) []Rerun {
	out := make([]Rerun, len(in))
	for n, e := range in {
		out[n] = Rerun{AuditID: e.AuditID, CreatedAt: e.CreatedAt, RequestedBy: e.RequestedBy, Reason: e.Reason,
			DispatchNow: e.DispatchNow, Requeued: e.Requeued, SkipReason: e.SkipReason}
	}
	return out
}

func stuckView(s report.Stuck) *Stuck {
	entities := EntitySection{Total: s.EntitiesWaiting.Total, Entities: make([]EntityWait, len(s.EntitiesWaiting.Entities))}
	for n, e := range s.EntitiesWaiting.Entities {
		entities.Entities[n] = EntityWait{EntityType: e.EntityType, EntityID: e.EntityID, Behind: e.Behind, Head: rowView(e.Head)}
	}
	return &Stuck{ExpiredLeases: sectionView(s.ExpiredLeases), AcceptedWaiting: sectionView(s.AcceptedWaiting),
		OverdueQueued: sectionView(s.OverdueQueued), Failed: sectionView(s.Failed),
		OldWorker: leftoverView(s.OldWorker), EntitiesWaiting: entities,
		Connections: append([]health.Connection{}, s.Connections...)}
}

func leftoverView(s report.LeftoverSection) LeftoverSection {
	rows := make([]report.Row, len(s.Rows))
	for n, l := range s.Rows {
		rows[n] = l.Row
	}
	base := sectionView(report.Section{Total: s.Total, Rows: rows})
	out := LeftoverSection{Total: s.Total, Rows: make([]Leftover, len(s.Rows))}
	for n, l := range s.Rows {
		out.Rows[n] = Leftover{Row: base.Rows[n], Kind: l.Kind, Next: l.Next, NextAt: l.NextAt}
	}
	return out
}

func sectionView(s report.Section) Section {
	out := Section{Total: s.Total, Rows: make([]Row, len(s.Rows))}
	for n, r := range s.Rows {
		out.Rows[n] = rowView(r)
	}
	return out
}

func rowView(r report.Row) Row {
	return Row{ID: r.ID, ConnectionID: r.ConnectionID, Provider: r.Provider, CommandType: r.CommandType,
		Status: r.Status, AttemptCount: r.AttemptCount, AttemptsLeft: r.AttemptsLeft, NextAttemptAt: r.NextAttemptAt,
		LeaseExpiresAt: r.LeaseExpiresAt, ProviderStatus: r.ProviderStatus, LastError: r.LastError,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}
