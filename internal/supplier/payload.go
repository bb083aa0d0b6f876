package supplier

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/mail"
	"strings"
	"unicode/utf8"

	"integration-outbox/internal/provider"
)

// payload is payload_json of a push_supplier row: the host's snapshot of
// the supplier at enqueue. Its keys are matched exactly; keys it does not
// name are the host's business and ignored.
type payload struct {
	Name         json.RawMessage `json:"name"`
	Email        json.RawMessage `json:"email"`
	Phone        json.RawMessage `json:"phone"`
	AddressLines json.RawMessage `json:"addressLines"`
	City         json.RawMessage `json:"city"`
	PostalCode   json.RawMessage `json:"postalCode"`
	Country      json.RawMessage `json:"country"`
	TaxNumber    json.RawMessage `json:"taxNumber"`
	CurrencyCode json.RawMessage `json:"currencyCode"`
	Code         json.RawMessage `json:"code"`
}

// maxAddressLines is how many address lines a supplier may have: Xero's
// address has four (AddressLine1..4), QuickBooks' five.
const maxAddressLines = 4

// maxFieldBytes bounds any one text of the supplier: no provider takes a
// longer one (Xero's contact name: 255 characters).
const maxFieldBytes = 500

// parseSupplier reads the supplier of entity id from payload_json, or says,
// naming the field, why it can never be sent.
func parseSupplier(id string, raw json.RawMessage) (provider.Supplier, error) {
	s := provider.Supplier{ID: id}
	if len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '{' {
		return s, fmt.Errorf("payload_json: must be a JSON object")
	}
	var p payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return s, fmt.Errorf("payload_json: %v", err)
	}
	var err error
	if s.Name, err = text("name", p.Name); err != nil {
		return s, err
	}
	if s.Name == "" {
		return s, fmt.Errorf("payload_json.name: is required")
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		to   *string
	}{{"email", p.Email, &s.Email}, {"phone", p.Phone, &s.Phone}, {"city", p.City, &s.City},
		{"postalCode", p.PostalCode, &s.PostalCode}, {"country", p.Country, &s.Country},
		{"taxNumber", p.TaxNumber, &s.TaxNumber}, {"currencyCode", p.CurrencyCode, &s.CurrencyCode},
		{"code", p.Code, &s.Code}} {
		if *f.to, err = text(f.name, f.raw); err != nil {
			return s, err
		}
	}
	if s.Email != "" {
		if a, err := mail.ParseAddress(s.Email); err != nil || a.Address != s.Email || a.Name != "" {
			return s, fmt.Errorf("payload_json.email: %q is not an email address", s.Email)
		}
	}
	if s.CurrencyCode != "" && !isCurrencyCode(s.CurrencyCode) {
		return s, fmt.Errorf("payload_json.currencyCode: %q is not an ISO 4217 code (three capital letters)", s.CurrencyCode)
	}
	if s.AddressLines, err = lines(p.AddressLines); err != nil {
		return s, err
	}
	return s, nil
}

// text reads one optional string field: null and absent are empty; white
// space around it is trimmed.
func text(name string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("payload_json.%s: must be a string", name)
	}
	return checked("payload_json."+name, v)
}

// checked trims v and refuses what no provider takes.
func checked(field, v string) (string, error) {
	v = strings.TrimSpace(v)
	switch {
	case !utf8.ValidString(v):
		return "", fmt.Errorf("%s: is not valid UTF-8", field)
	case len(v) > maxFieldBytes:
		return "", fmt.Errorf("%s: is %d bytes, more than %d", field, len(v), maxFieldBytes)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", fmt.Errorf("%s: contains a control character", field)
	}
	return v, nil
}

// lines reads addressLines: an array of at most maxAddressLines strings;
// empty lines are dropped.
func lines(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var vs []json.RawMessage
	if err := json.Unmarshal(raw, &vs); err != nil {
		return nil, fmt.Errorf("payload_json.addressLines: must be an array of strings")
	}
	var out []string
	for i, r := range vs {
		var v string
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, fmt.Errorf("payload_json.addressLines[%d]: must be a string", i)
		}
		v, err := checked(fmt.Sprintf("payload_json.addressLines[%d]", i), v)
		if err != nil {
			return nil, err
		}
		if v != "" {
			out = append(out, v)
		}
	}
	if len(out) > maxAddressLines {
		return nil, fmt.Errorf("payload_json.addressLines: has %d lines, at most %d can be sent", len(out), maxAddressLines)
	}
	return out, nil
}

func isCurrencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}
