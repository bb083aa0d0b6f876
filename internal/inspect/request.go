package inspect

import (
	"fmt"
	"strings"

	"integration-outbox/internal/message"
	"integration-outbox/internal/strictjson"
)

// MaxLimit bounds limit, the rows of each section of the stuck view.
const MaxLimit = 1000

// Request is a validated inspection payload: exactly one of OutboxID and
// Stuck is set.
type Request struct {
	OrganizationID string
	OutboxID       string
	Stuck          bool
	// Limit caps the rows of each stuck section (0: the reader's default, 50).
	Limit int
	// Preview asks, with OutboxID, for the request the push would send now
	// (push.Preview).
	Preview bool
}

// payload is the wire shape of an inspect invocation (contract):
// {"organizationId": "…", "outboxId": "…"} or
// {"organizationId": "…", "stuck": true}; "preview": true with outboxId.
type payload struct {
	OrganizationID *string `json:"organizationId"`
	OutboxID       *string `json:"outboxId"`
	Stuck          *bool   `json:"stuck"`
	Limit          *int    `json:"limit"`
	Preview        *bool   `json:"preview"`
}

// Parse decodes and validates an inspection payload. Keys are
// case-sensitive; an unknown key is an error. Every error wraps a
// *strictjson.FieldError naming the field.
func Parse(raw []byte) (Request, error) {
	var p payload
	if err := strictjson.DecodePayload(raw, &p); err != nil {
		return Request{}, fmt.Errorf("inspect payload: %w", err)
	}
	req, err := p.validate()
	if err != nil {
		return Request{}, fmt.Errorf("inspect payload: %w", err)
	}
	return req, nil
}

func (p payload) validate() (Request, error) {
	var req Request
	if p.OrganizationID == nil || *p.OrganizationID == "" {
		return req, strictjson.Fieldf("organizationId", "is required: every view is scoped to one organization")
	}
	if !message.IsUUID(*p.OrganizationID) {
		return req, strictjson.Fieldf("organizationId", "must be a uuid, got %q", clip(*p.OrganizationID))
	}
	req.OrganizationID = strings.ToLower(*p.OrganizationID)
	req.Stuck = p.Stuck != nil && *p.Stuck
	switch {
	case p.OutboxID != nil && req.Stuck:
		return req, strictjson.Fieldf("stuck", "give either outboxId or stuck, not both")
	case p.OutboxID != nil:
		if !message.IsUUID(*p.OutboxID) {
			return req, strictjson.Fieldf("outboxId", "must be a uuid, got %q", clip(*p.OutboxID))
		}
		req.OutboxID = strings.ToLower(*p.OutboxID)
	case p.Stuck != nil && !*p.Stuck:
		return req, strictjson.Fieldf("stuck", "must be true when given (or give outboxId instead)")
	case !req.Stuck:
		return req, strictjson.Fieldf("outboxId", `is required, or "stuck": true for the stuck view`)
	}
	if p.Limit != nil {
		if req.OutboxID != "" {
			return req, strictjson.Fieldf("limit", "applies to the stuck view only")
		}
		if *p.Limit < 1 || *p.Limit > MaxLimit {
			return req, strictjson.Fieldf("limit", "must be from 1 to %d, got %d", MaxLimit, *p.Limit)
		}
		req.Limit = *p.Limit
	}
	if p.Preview != nil {
		if req.OutboxID == "" {
			return req, strictjson.Fieldf("preview", "applies to one row: give outboxId with it")
		}
		req.Preview = *p.Preview
	}
	return req, nil
}

// clip keeps a quoted bad value short.
func clip(s string) string {
	if r := []rune(s); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return s
}
