// Package message is the SQS body the dispatcher sends and the command
// functions receive: one message per claimed command.
package message

import (
	"encoding/json"
	"fmt"
	"strings"

	"integration-outbox/internal/strictjson"
)

// Message is the body of one command message (contract).
type Message struct {
	OutboxID       string `json:"outboxId"`
	OrganizationID string `json:"organizationId"`
	ConnectionID   string `json:"connectionId"`
	CommandType    string `json:"commandType"`
	ClaimToken     string `json:"claimToken"`
}

// Encode renders the message body.
func (m Message) Encode() (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encoding message for outbox row %s: %w", m.OutboxID, err)
	}
	return string(b), nil
}

// IsUUID reports whether s is a canonical textual uuid
// (8-4-4-4-12 hexadecimal digits).
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// CanonicalUUID returns a uuid that passed IsUUID in its canonical form,
// lower case: ids from outside (messages, console events) are compared with
// ids read from PostgreSQL only in that form.
func CanonicalUUID(s string) string { return strings.ToLower(s) }

// Decode parses and validates a message body: case-sensitive keys, no
// unknown keys, every id a uuid, a command type present. Ids come back in
// their canonical form (lower case), the form PostgreSQL prints and every
// comparison uses.
func Decode(body string) (Message, error) {
	var m Message
	if err := strictjson.Decode([]byte(body), &m); err != nil {
		return Message{}, fmt.Errorf("message body: %w", err)
	}
	for _, f := range []struct{ name, value string }{
		{"outboxId", m.OutboxID}, {"organizationId", m.OrganizationID},
		{"connectionId", m.ConnectionID}, {"claimToken", m.ClaimToken},
	} {
		if !IsUUID(f.value) {
			return Message{}, fmt.Errorf("message body: %s: must be a uuid, got %q", f.name, truncate(f.value, 64))
		}
	}
	if m.CommandType == "" {
		return Message{}, fmt.Errorf("message body: commandType: is required")
	}
	for _, id := range []*string{&m.OutboxID, &m.OrganizationID, &m.ConnectionID, &m.ClaimToken} {
		*id = CanonicalUUID(*id)
	}
	return m, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
