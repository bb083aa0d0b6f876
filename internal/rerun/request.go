package rerun

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/strictjson"
)

// Payload limits (contract: limit defaults to 100, from 1 to 1000).
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxReasonLength bounds reason: it is copied onto every conflict the
	// rerun resolves.
	MaxReasonLength = 1000
	// MaxRequestedByLength bounds requestedBy.
	MaxRequestedByLength = 200

	maxCommandTypeLength = 200
)

// Requeueable is the statuses a rerun puts back to queued, in the order the
// contract lists them.
var Requeueable = []string{string(outbox.StatusDeadLetter), string(outbox.StatusFailed), string(outbox.StatusUncertain)}

// Request is a validated rerun payload with its defaults applied. Exactly one
// of OutboxIDs, Filter and EnableConnection is set.
type Request struct {
	OrganizationID string
	// OutboxIDs are lower-case, without duplicates, in the order given.
	OutboxIDs     []string
	Filter        *Filter
	Limit         int
	ResetAttempts bool
	DispatchNow   bool
	DryRun        bool
	Reason        string
	RequestedBy   string
	// EnableConnection, when set, is the only thing the request does:
	// enable that disabled connection of the organization again (no
	// outboxIds, filter, limit, resetAttempts, dispatchNow or dryRun).
	EnableConnection string
}

// Filter selects rows by their columns; every set field must match.
type Filter struct {
	// Statuses is never empty: all of Requeueable when the payload omits it.
	Statuses     []string
	ConnectionID string
	CommandType  string
	// CreatedAfter is inclusive and CreatedBefore exclusive, both in UTC;
	// zero means unbounded.
	CreatedAfter  time.Time
	CreatedBefore time.Time
}

// payload is the wire shape of a rerun invocation (contract). Pointers tell
// an absent key from a zero value.
type payload struct {
	OrganizationID *string        `json:"organizationId"`
	OutboxIDs      []string       `json:"outboxIds"`
	Filter         *filterPayload `json:"filter"`
	Limit          *int           `json:"limit"`
	ResetAttempts  bool           `json:"resetAttempts"`
	DispatchNow    bool           `json:"dispatchNow"`
	DryRun         bool           `json:"dryRun"`
	Reason         *string        `json:"reason"`
	RequestedBy    *string        `json:"requestedBy"`
	// EnableConnection names a disabled connection to enable again.
	EnableConnection *string `json:"enableConnection"`
}

type filterPayload struct {
	Statuses      []string `json:"statuses"`
	ConnectionID  *string  `json:"connectionId"`
	CommandType   *string  `json:"commandType"`
	CreatedAfter  *string  `json:"createdAfter"`
	CreatedBefore *string  `json:"createdBefore"`
}

// Parse decodes and validates a rerun payload. Keys are case-sensitive and
// an unknown key is an error. Every error wraps a *strictjson.FieldError
// naming the offending field (e.g. "outboxIds[2]", "filter.statuses[0]").
func Parse(raw []byte) (Request, error) {
	var p payload
	if err := strictjson.DecodePayload(raw, &p); err != nil {
		return Request{}, fmt.Errorf("rerun payload: %w", err)
	}
	req, err := p.validate()
	if err != nil {
		return Request{}, fmt.Errorf("rerun payload: %w", err)
	}
	return req, nil
}

func (p payload) validate() (Request, error) {
	var req Request
	if p.OrganizationID == nil || *p.OrganizationID == "" {
		return req, strictjson.Fieldf("organizationId", "is required")
	}
	if !message.IsUUID(*p.OrganizationID) {
		return req, strictjson.Fieldf("organizationId", "must be a uuid, got %q", clip(*p.OrganizationID))
	}
	req.OrganizationID = strings.ToLower(*p.OrganizationID)

	if p.Reason == nil || strings.TrimSpace(*p.Reason) == "" {
		return req, strictjson.Fieldf("reason", "is required: say why these rows are rerun")
	}
	if err := text("reason", *p.Reason, MaxReasonLength); err != nil {
		return req, err
	}
	req.Reason = strings.TrimSpace(*p.Reason)
	if p.RequestedBy != nil {
		if err := text("requestedBy", *p.RequestedBy, MaxRequestedByLength); err != nil {
			return req, err
		}
		req.RequestedBy = strings.TrimSpace(*p.RequestedBy)
	}

	if p.EnableConnection != nil {
		return p.validateEnable(req)
	}

	req.Limit = DefaultLimit
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > MaxLimit {
			return req, strictjson.Fieldf("limit", "must be from 1 to %d, got %d", MaxLimit, *p.Limit)
		}
		req.Limit = *p.Limit
	}

	switch {
	case p.OutboxIDs != nil && p.Filter != nil:
		return req, strictjson.Fieldf("outboxIds", "give either outboxIds or filter, not both")
	case p.OutboxIDs == nil && p.Filter == nil:
		return req, strictjson.Fieldf("outboxIds", "give either outboxIds or filter")
	case p.OutboxIDs != nil:
		ids, err := validateIDs(p.OutboxIDs, req.Limit)
		if err != nil {
			return req, err
		}
		req.OutboxIDs = ids
	default:
		f, err := p.Filter.validate()
		if err != nil {
			return req, err
		}
		req.Filter = f
	}
	req.ResetAttempts, req.DispatchNow, req.DryRun = p.ResetAttempts, p.DispatchNow, p.DryRun
	return req, nil
}

// validateEnable validates an enableConnection payload: the connection id
// and nothing of a requeue beside it.
func (p payload) validateEnable(req Request) (Request, error) {
	id := *p.EnableConnection
	if id == "" {
		return req, strictjson.Fieldf("enableConnection", "must be the id of the connection to enable")
	}
	if !message.IsUUID(id) {
		return req, strictjson.Fieldf("enableConnection", "must be a uuid, got %q", clip(id))
	}
	for _, other := range []struct {
		name string
		set  bool
	}{
		{"outboxIds", p.OutboxIDs != nil}, {"filter", p.Filter != nil}, {"limit", p.Limit != nil},
		{"resetAttempts", p.ResetAttempts}, {"dispatchNow", p.DispatchNow}, {"dryRun", p.DryRun},
	} {
		if other.set {
			return req, strictjson.Fieldf(other.name, "must be left out with enableConnection: enabling a connection requeues nothing itself")
		}
	}
	req.EnableConnection = strings.ToLower(id)
	return req, nil
}

func validateIDs(in []string, limit int) ([]string, error) {
	if len(in) == 0 {
		return nil, strictjson.Fieldf("outboxIds", "must list at least one id")
	}
	ids := make([]string, 0, len(in))
	seen := make(map[string]bool, len(in))
	for i, id := range in {
		if !message.IsUUID(id) {
			return nil, strictjson.Fieldf(fmt.Sprintf("outboxIds[%d]", i), "must be a uuid, got %q", clip(id))
		}
		id = strings.ToLower(id)
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) > limit {
		return nil, strictjson.Fieldf("outboxIds", "lists %d ids, more than limit %d (raise limit, at most %d)",
			len(ids), limit, MaxLimit)
	}
	return ids, nil
}

func (p *filterPayload) validate() (*Filter, error) {
	f := &Filter{}
	if p.Statuses == nil {
		f.Statuses = slices.Clone(Requeueable)
	} else if len(p.Statuses) == 0 {
		return nil, strictjson.Fieldf("filter.statuses", "must list at least one of %s (or be left out for all of them)",
			strings.Join(Requeueable, ", "))
	}
	for i, s := range p.Statuses {
		if !slices.Contains(Requeueable, s) {
			return nil, strictjson.Fieldf(fmt.Sprintf("filter.statuses[%d]", i), "%q is not a requeueable status (%s)",
				clip(s), strings.Join(Requeueable, ", "))
		}
		if !slices.Contains(f.Statuses, s) {
			f.Statuses = append(f.Statuses, s)
		}
	}
	if p.ConnectionID != nil {
		if !message.IsUUID(*p.ConnectionID) {
			return nil, strictjson.Fieldf("filter.connectionId", "must be a uuid, got %q", clip(*p.ConnectionID))
		}
		f.ConnectionID = strings.ToLower(*p.ConnectionID)
	}
	if p.CommandType != nil {
		if strings.TrimSpace(*p.CommandType) == "" {
			return nil, strictjson.Fieldf("filter.commandType", "must not be empty (leave it out to match every command type)")
		}
		if err := text("filter.commandType", *p.CommandType, maxCommandTypeLength); err != nil {
			return nil, err
		}
		f.CommandType = *p.CommandType
	}
	var err error
	if f.CreatedAfter, err = timestamp("filter.createdAfter", p.CreatedAfter); err != nil {
		return nil, err
	}
	if f.CreatedBefore, err = timestamp("filter.createdBefore", p.CreatedBefore); err != nil {
		return nil, err
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedBefore.After(f.CreatedAfter) {
		return nil, strictjson.Fieldf("filter.createdBefore", "must be later than filter.createdAfter")
	}
	return f, nil
}

func timestamp(field string, s *string) (time.Time, error) {
	if s == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, strictjson.Fieldf(field, "must be an RFC 3339 timestamp such as 2024-05-01T00:00:00Z, got %q", clip(*s))
	}
	return t.UTC(), nil
}

func text(field, s string, maxLen int) error {
	if !utf8.ValidString(s) {
		return strictjson.Fieldf(field, "must be valid UTF-8")
	}
	if strings.ContainsRune(s, 0) {
		return strictjson.Fieldf(field, "must not contain NUL characters")
	}
	if n := utf8.RuneCountInString(s); n > maxLen {
		return strictjson.Fieldf(field, "must be at most %d characters, got %d", maxLen, n)
	}
	return nil
}

// clip keeps echoed input short in error messages.
func clip(s string) string {
	if utf8.RuneCountInString(s) <= 64 {
		return s
	}
	return string([]rune(s)[:64]) + "…"
}

// auditPayload renders the request as the audit row stores it: the
// contract's payload shape with every default filled in.
func (r Request) auditPayload() ([]byte, error) {
	type filter struct {
		Statuses      []string `json:"statuses"`
		ConnectionID  string   `json:"connectionId,omitempty"`
		CommandType   string   `json:"commandType,omitempty"`
		CreatedAfter  string   `json:"createdAfter,omitempty"`
		CreatedBefore string   `json:"createdBefore,omitempty"`
	}
	doc := struct {
		OrganizationID string   `json:"organizationId"`
		OutboxIDs      []string `json:"outboxIds,omitempty"`
		Filter         *filter  `json:"filter,omitempty"`
		Limit          int      `json:"limit"`
		ResetAttempts  bool     `json:"resetAttempts"`
		DispatchNow    bool     `json:"dispatchNow"`
		DryRun         bool     `json:"dryRun"`
		Reason         string   `json:"reason"`
		RequestedBy    string   `json:"requestedBy,omitempty"`
		// EnableConnection stands alone: the requeue fields say nothing.
		EnableConnection string `json:"enableConnection,omitempty"`
	}{
		OrganizationID: r.OrganizationID, OutboxIDs: r.OutboxIDs, Limit: r.Limit,
		ResetAttempts: r.ResetAttempts, DispatchNow: r.DispatchNow, DryRun: r.DryRun,
		Reason: r.Reason, RequestedBy: r.RequestedBy, EnableConnection: r.EnableConnection,
	}
	if f := r.Filter; f != nil {
		doc.Filter = &filter{Statuses: f.Statuses, ConnectionID: f.ConnectionID, CommandType: f.CommandType,
			CreatedAfter: rfc3339(f.CreatedAfter), CreatedBefore: rfc3339(f.CreatedBefore)}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the audit payload: %w", err)
	}
	return b, nil
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}
