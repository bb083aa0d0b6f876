package push_test

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// echoForms returns the ways a provider may echo v back: raw, as
// encoding/json writes it, as PHP's json_encode writes it ("\/" for '/',
// \uXXXX for non-ASCII), URL-encoded (query and path) and base64.
func echoForms(t *testing.T, v string) []string {
	t.Helper()
	goJSON, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ascii := strconv.QuoteToASCII(v) // equals JSON for printable text without '"' or '\'
	php := strings.ReplaceAll(ascii[1:len(ascii)-1], "/", `\/`)
	return []string{v, string(goJSON[1 : len(goJSON)-1]), php, url.QueryEscape(v), url.PathEscape(v),
		base64.StdEncoding.EncodeToString([]byte(v))}
}

func TestSecretEchoedInAnyEncodingIsNeverStoredOrLogged(t *testing.T) {
	t.Parallel()
	const token, signing = "tok/SECRET+abc==", "sig-SECRET-é<&>"
	forms := append(echoForms(t, token), echoForms(t, signing)...)
	echo := "invalid credential: " + strings.Join(forms, " | ")
	for _, tc := range []struct {
		name, wantStatus string
		status           int
	}{
		{"rejected (dead_letter and conflict)", "dead_letter", 400},
		{"retryable (failed)", "failed", 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs, emf syncBuffer
			b := setup(t, func(o *options) { o.logs, o.metrics = &logs, &emf })
			ref := secret(t, `{"token":"`+token+`","signingSecret":"`+signing+`"}`, b.org)
			rc := newReceiver(t, answer(tc.status, nil, echo))
			id := b.webhookCommand(t, rc.URL, ref)
			b.handle(t, b.claim(t, 10))

			r := b.f.Row(t, id)
			if r.Status != tc.wantStatus {
				t.Fatalf("row %s, want %s (last_error %q)", r.Status, tc.wantStatus, deref(r.LastError))
			}
			if !strings.Contains(deref(r.LastError), "[redacted]") {
				t.Errorf("last_error %q does not quote the masked body", deref(r.LastError))
			}
			var summaries []string
			rows, err := b.f.Pool.Query(t.Context(), `select summary from external_integration_conflicts where outbox_id = $1`, id)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				summaries = append(summaries, s)
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			if (tc.wantStatus == "dead_letter") != (len(summaries) == 1) {
				t.Fatalf("conflict summaries %q for a %s row", summaries, tc.wantStatus)
			}
			for what, text := range map[string]string{"last_error": deref(r.LastError),
				"conflict summary": strings.Join(summaries, "\n"), "logs": logs.String(), "metrics": emf.String()} {
				for _, f := range forms {
					if strings.Contains(text, f) {
						t.Errorf("%s holds the secret form %q: %s", what, f, text)
					}
				}
			}
			if !strings.Contains(logs.String(), `"job finished"`) {
				t.Errorf("no job finished line logged: %s", logs.String())
			}
		})
	}
}
