package strictjson

import (
	"strings"
	"testing"
)

type inner struct {
	Statuses []string `json:"statuses"`
	Name     string   `json:"name"`
}

type outer struct {
	Limit  int    `json:"limit"`
	Org    string `json:"organizationId"`
	Flag   *bool  `json:"flag"`
	Filter *inner `json:"filter"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr string // substring; empty means success
	}{
		{`{}`, ""},
		{`{"limit": 5, "organizationId": "x", "flag": true, "filter": {"statuses": ["a"]}}`, ""},
		{`{"Limit": 5}`, "Limit: unknown field"},
		{`{"organizationid": "x"}`, "organizationid: unknown field"},
		{`{"limit": "5"}`, "limit: must be an integer"},
		{`{"limit": 1.5}`, "limit: must be an integer"},
		{`{"filter": {"Statuses": []}}`, "filter.Statuses: unknown field"},
		{`{"filter": {"statuses": "dead_letter"}}`, "filter.statuses: must be an array of string"},
		{`{"filter": []}`, "filter: must be a JSON object"},
		{`[]`, "payload: must be a JSON object"},
		{`{"limit": 5`, "payload: malformed JSON"},
		{``, "payload: must be a JSON object"},
		{`{"flag": null, "filter": null}`, ""},
		{`{"": 0}`, `"": unknown field`},
	} {
		var o outer
		err := Decode([]byte(tc.in), &o)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.in, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want it to contain %q", tc.in, err, tc.wantErr)
		}
	}
	var esc outer
	if err := Decode([]byte(`{"organizationId": "a\"b\u00e9", "filter": {"name": ""}}`), &esc); err != nil || esc.Org != "a\"bé" || esc.Filter.Name != "" {
		t.Errorf("escaped strings: %q %+v %v", esc.Org, esc.Filter, err)
	}
	var o outer
	if err := Decode([]byte(`{"limit": 5, "flag": false, "filter": {"statuses": ["a","b"], "name": "n"}}`), &o); err != nil {
		t.Fatal(err)
	}
	if o.Limit != 5 || o.Flag == nil || *o.Flag || o.Filter == nil || len(o.Filter.Statuses) != 2 || o.Filter.Name != "n" {
		t.Errorf("decoded %+v %+v", o, o.Filter)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"limit":1}`, `{"filter":{"statuses":["x"]}}`, `{"LIMIT":1}`, `[`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var o outer
		_ = Decode(data, &o) // must not panic
	})
}
