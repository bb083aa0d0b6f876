package faulttest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/testenv"
)

// echoProvider is a careless third-party provider: its errors quote the
// credential it was given, whole and split by a NUL byte, amid binary junk,
// far beyond 1000 characters.
type echoProvider struct{}

func (echoProvider) Name() string { return "echo" }

func (echoProvider) PushPurchaseOrder(_ context.Context, _ provider.Connection, cred credential.Credential, _ provider.PurchaseOrderPush) (provider.Result, error) {
	tok := cred.Token.Reveal()
	half := len(tok) / 2
	msg := "denied for " + tok + "; split " + tok[:half] + "\x00" + tok[half:] + "; junk \xff\xfe\x00\x01" +
		strings.Repeat("é", 600) + " again " + cred.SigningSecret.Reveal() + strings.Repeat("z", 3000)
	return provider.Result{}, &provider.Error{Kind: provider.Retryable, Message: msg}
}

// TestProviderErrorTextsAreStoredSafely: provider answers that are huge,
// binary or quote the secret end in last_error (and the conflict's summary
// and snapshot) as at most 1000 characters of valid UTF-8 with every secret
// value masked; the logs never see the secret either.
func TestProviderErrorTextsAreStoredSafely(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	token, signing := "tok-"+rand.Text(), "sig-"+rand.Text()
	api := secretsmanager.NewFromConfig(moto.AWSConfig())
	org := e.f.NewID(t)
	ref, _ := testenv.CreateSecret(t, api, testenv.SecretName(t, "-echo"), fmt.Sprintf(`{"token":%q,"signingSecret":%q}`, token, signing), org)
	binary := make([]byte, 4096)
	rand.Read(binary)
	answers := map[string]testenv.Answer{
		"huge 500": testenv.Reply(500, strings.Repeat("x", 2<<20)+token),
		"binary 503": func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(503)
			w.Write(binary)
		},
		"500 quoting the secret":                    testenv.Reply(500, "bad auth "+token+" / "+signing+" \x00\xff "+token),
		"500 cutting the secret at the quote limit": testenv.Reply(500, strings.Repeat("y", 495)+token+strings.Repeat("y", 100)),
		"400 quoting the secret":                    testenv.Reply(400, `{"error":"token `+token+` rejected","sig":"`+signing+`"}`),
		"401 quoting the secret":                    testenv.Reply(401, "who is "+token+"?"),
		"200 with the secret as id":                 testenv.Reply(200, `{"id":"`+token+`"}`),
		"redirect to a secret URL": func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+signing+".example/?t="+token, http.StatusFound)
		},
	}
	what := map[string]string{}
	receivers := map[string]*testenv.Receiver{}
	for name, h := range answers {
		rc := testenv.NewReceiver(t, h)
		conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook", CredentialReference: ref,
			Config: map[string]string{"url": rc.URL}})
		id := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "webhook", EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		what[id], receivers[name] = name, rc
	}
	echoConn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "echo", CredentialReference: ref})
	echo := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: echoConn, Provider: "echo", EntityID: e.f.PurchaseOrder(t, org, "", 1)})
	what[echo] = "careless provider"

	e.dispatch(t, 15*time.Minute)
	e.drain(t, e.worker(t, workerOpts{providers: provider.Registry{provider.NameWebhook: e.webhook, "echo": echoProvider{}}}))

	all := checkEveryRow(t, e.f.Pool)
	for id, name := range what {
		r := all[id]
		wantStatus := map[string]string{"400 quoting the secret": "dead_letter", "401 quoting the secret": "dead_letter",
			"redirect to a secret URL": "dead_letter", "200 with the secret as id": "completed"}[name]
		if wantStatus == "" {
			wantStatus = "failed"
		}
		if r.Status != wantStatus {
			t.Errorf("%s: row %s, want %s (last_error %q)", name, r.Status, wantStatus, r.LastError)
		}
		if r.Status != "completed" && (r.LastError == "" || len([]rune(r.LastError)) > 1000) {
			t.Errorf("%s: last_error of %d characters", name, len([]rune(r.LastError)))
		}
		// No secret, nor the first half of one (a secret cut at the limit).
		mustNotContain(t, name+": last_error", r.LastError, token, signing, token[:len(token)/2], signing[:len(signing)/2])
		mustNotContain(t, name+": provider_reference", r.ProviderReference, token)
	}
	if r := all[echo]; !strings.Contains(r.LastError, "denied for [redacted]") {
		t.Errorf("careless provider: last_error %q", r.LastError)
	}
	if n := receivers["401 quoting the secret"].Calls(); n != 2 {
		t.Errorf("401: %d calls, want 2 (the credential refreshed once)", n)
	}
	// Every text column of both tables, conflicts' summaries and snapshots
	// included, and every log line.
	db := dumpText(t, e.f.Pool)
	mustNotContain(t, "the database", db, token, signing, token[:len(token)/2])
	mustNotContain(t, "the logs", e.logs.String(), token, signing, token[:len(token)/2])
	var long int
	if err := e.f.Pool.QueryRow(context.Background(), `select count(*) from external_integration_conflicts
		where char_length(summary) > 1200 or char_length(local_snapshot->>'lastError') > 1000`).Scan(&long); err != nil || long != 0 {
		t.Errorf("%d conflicts with over-long texts (%v)", long, err)
	}
}
