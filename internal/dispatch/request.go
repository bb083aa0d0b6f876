package dispatch

import (
	"bytes"
	"encoding/json"
	"fmt"

	"integration-outbox/internal/message"
	"integration-outbox/internal/strictjson"
)

// MaxLimit is the largest "limit" a console event may ask for.
const MaxLimit = 5000

// Request is one dispatch run's bounds.
type Request struct {
	// Limit caps the rows claimed in this run; 0 means DISPATCH_MAX_PER_RUN.
	Limit int
	// OrganizationID, when set, claims only that organization's rows.
	OrganizationID string
	// IDs, when non-nil, claims only these rows (a rerun's dispatchNow).
	IDs []string
}

// consoleEvent is what the scheduler's Input or a console test event holds.
type consoleEvent struct {
	Limit          *int    `json:"limit"`
	OrganizationID *string `json:"organizationId"`
}

// ParseEvent reads a dispatch invocation: {} or {"limit": N} with an optional
// "organizationId" (scheduler Input or console test event), or the classic
// EventBridge rule envelope ("detail-type": "Scheduled Event").
func ParseEvent(raw []byte) (Request, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Request{}, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return Request{}, fmt.Errorf("dispatch event: payload: must be a JSON object")
	}
	if dt, ok := probe["detail-type"]; ok {
		// An EventBridge rule's envelope: AWS owns its shape, so only its
		// marker is checked. It asks for a regular scheduled run and cannot
		// carry console fields.
		var detailType string
		if err := json.Unmarshal(dt, &detailType); err != nil || detailType != "Scheduled Event" {
			return Request{}, fmt.Errorf(`dispatch event: detail-type: must be "Scheduled Event", got %s`, clip(dt))
		}
		for _, k := range []string{"limit", "organizationId"} {
			if _, mixed := probe[k]; mixed {
				return Request{}, fmt.Errorf("dispatch event: %s: not allowed in an EventBridge envelope", k)
			}
		}
		return Request{}, nil
	}
	var ev consoleEvent
	if err := strictjson.Decode(raw, &ev); err != nil {
		return Request{}, fmt.Errorf("dispatch event: %w", err)
	}
	var req Request
	if ev.Limit != nil {
		if *ev.Limit < 1 || *ev.Limit > MaxLimit {
			return Request{}, fmt.Errorf("dispatch event: limit: must be from 1 to %d, got %d", MaxLimit, *ev.Limit)
		}
		req.Limit = *ev.Limit
	}
	if ev.OrganizationID != nil {
		if !message.IsUUID(*ev.OrganizationID) {
			return Request{}, fmt.Errorf("dispatch event: organizationId: must be a uuid, got %q", *ev.OrganizationID)
		}
		req.OrganizationID = message.CanonicalUUID(*ev.OrganizationID)
	}
	return req, nil
}

func clip(raw []byte) string {
	if len(raw) > 64 {
		return string(raw[:64]) + "…"
	}
	return string(raw)
}
