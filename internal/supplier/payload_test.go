package supplier

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// What can never be sent is refused naming the field; what can is read,
// trimmed, empty lines dropped; keys it does not name are ignored.
func TestParseSupplierNamesTheFieldItRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		payload, refused string
	}{
		{`[]`, "payload_json: must be a JSON object"},
		{`null`, "payload_json: must be a JSON object"},
		{`{}`, "payload_json.name: is required"},
		{`{"name": "  "}`, "payload_json.name: is required"},
		{`{"name": 7}`, "payload_json.name: must be a string"},
		{`{"name": "A", "email": ["a@b.c"]}`, "payload_json.email: must be a string"},
		{`{"name": "A", "email": "not an address"}`, "payload_json.email: \"not an address\" is not an email address"},
		{`{"name": "A", "email": "Ann <a@b.c>"}`, "payload_json.email:"},
		{`{"name": "A", "currencyCode": "eur"}`, "payload_json.currencyCode: \"eur\" is not an ISO 4217 code"},
		{`{"name": "A", "addressLines": "1 Road"}`, "payload_json.addressLines: must be an array of strings"},
		{`{"name": "A", "addressLines": ["1 Road", 2]}`, "payload_json.addressLines[1]: must be a string"},
		{`{"name": "A", "addressLines": ["1", "2", "3", "4", "5"]}`, "payload_json.addressLines: has 5 lines, at most 4"},
		{`{"name": "A\u0007B"}`, "payload_json.name: contains a control character"},
		{`{"name": "` + strings.Repeat("n", 501) + `"}`, "payload_json.name: is 501 bytes, more than 500"},
		{`{"name": "A", "taxNumber": {"v": 1}}`, "payload_json.taxNumber: must be a string"},
	} {
		_, err := parseSupplier("s-1", json.RawMessage(c.payload))
		if err == nil || !strings.HasPrefix(err.Error(), c.refused) {
			t.Errorf("parseSupplier(%s) = %v, want %q", c.payload, err, c.refused)
		}
	}
	s, err := parseSupplier("s-1", json.RawMessage(`{"name": " Fresh Produce Ltd ", "email": "orders@fresh.example",
		"phone": "+64 9 555 0100", "addressLines": ["1 Quay Street", " ", null], "city": "Auckland", "postalCode": "1010",
		"country": "NZ", "taxNumber": "123-456-789", "currencyCode": "NZD", "code": "SUP-FRESH", "hostOnly": {"x": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "s-1" || s.Name != "Fresh Produce Ltd" || s.Email != "orders@fresh.example" || s.Phone != "+64 9 555 0100" ||
		!slices.Equal(s.AddressLines, []string{"1 Quay Street"}) || s.City != "Auckland" || s.PostalCode != "1010" ||
		s.Country != "NZ" || s.TaxNumber != "123-456-789" || s.CurrencyCode != "NZD" || s.Code != "SUP-FRESH" {
		t.Errorf("parseSupplier = %+v", s)
	}
}

// FuzzParseSupplier: payload_json is the host's; whatever it holds, a
// supplier that parses has a name and fields no provider refuses for
// their form.
func FuzzParseSupplier(f *testing.F) {
	for _, seed := range []string{`{"name":"A"}`, `{"name":"A","addressLines":["x"]}`, `{"name":"\u0000"}`,
		`{"name":"A","email":"a@b.c","currencyCode":"EUR"}`, `{"name":["A"]}`, `"A"`, `{"name":"A","name":"B"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := parseSupplier("id", raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "payload_json") {
				t.Fatalf("error %q does not name the field", err)
			}
			return
		}
		if s.Name == "" || len(s.AddressLines) > maxAddressLines {
			t.Fatalf("parseSupplier(%q) = %+v", raw, s)
		}
		for _, v := range append([]string{s.Name, s.Email, s.Phone, s.City, s.PostalCode, s.Country, s.TaxNumber,
			s.CurrencyCode, s.Code}, s.AddressLines...) {
			if v != strings.TrimSpace(v) || len(v) > maxFieldBytes || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 }) {
				t.Fatalf("parseSupplier(%q) kept %q", raw, v)
			}
		}
	})
}
