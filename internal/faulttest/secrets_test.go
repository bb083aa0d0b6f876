package faulttest

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// throttling answers ThrottlingException while on, as Secrets Manager does
// past its request rate.
type throttling struct {
	credential.SecretsAPI
	on atomic.Bool
}

var errThrottled = &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}

func (s *throttling) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, o ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	if s.on.Load() {
		return nil, errThrottled
	}
	return s.SecretsAPI.GetSecretValue(ctx, in, o...)
}

func (s *throttling) DescribeSecret(ctx context.Context, in *secretsmanager.DescribeSecretInput, o ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error) {
	if s.on.Load() {
		return nil, errThrottled
	}
	return s.SecretsAPI.DescribeSecret(ctx, in, o...)
}

// TestSecretsManagerUnavailable stops a moto_server of its own in the middle
// of a run: the jobs that need a credential fail as retryable, with backoff,
// without calling the provider, and with no secret value in any log line or
// column; throttling does the same; when Secrets Manager is back (moto
// restarts empty, so the secret is created again) the retries complete.
func TestSecretsManagerUnavailable(t *testing.T) {
	t.Parallel()
	m2 := testenv.OwnMoto(t)
	e := newEnv(t)
	api := secretsmanager.NewFromConfig(m2.AWSConfig())
	sm := &throttling{SecretsAPI: api}
	// Cache off: every job reads the secret, so the outage is felt at once.
	resolver, err := credential.NewResolver(sm, credential.ResolverConfig{Region: "us-east-1", TTL: -1, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	w := e.worker(t, workerOpts{creds: resolver})

	token, signing := "tok-"+rand.Text(), "sig-"+rand.Text()
	secretValue := fmt.Sprintf(`{"token":%q,"signingSecret":%q}`, token, signing)
	org := e.f.NewID(t)
	ref, _ := testenv.CreateSecret(t, api, testenv.SecretName(t, "-outage"), secretValue, org)
	rc := testenv.NewReceiver(t, testenv.Reply(200, `{"id":"EXT"}`))
	conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook", CredentialReference: ref,
		Config: map[string]string{"url": rc.URL}})
	command := func() string {
		return e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "webhook", EntityID: e.f.PurchaseOrder(t, org, "", 1)})
	}

	// Up: a job completes with the credential.
	before := command()
	e.dispatch(t, 15*time.Minute)
	e.drain(t, w)

	// Down mid-run, then throttling.
	m2.Stop()
	down := []string{command(), command()}
	e.dispatch(t, 15*time.Minute)
	e.drain(t, w)
	sm.on.Store(true)
	throttled := command()
	e.dispatch(t, 15*time.Minute)
	e.drain(t, w)
	sm.on.Store(false)

	all := checkEveryRow(t, e.f.Pool)
	if r := all[before]; r.Status != "completed" {
		t.Fatalf("before the outage: %+v", r)
	}
	for _, id := range append(down, throttled) {
		r := all[id]
		if r.Status != "failed" || r.Attempts != 1 || r.NextIn == nil || *r.NextIn < 25 || *r.NextIn > 31 ||
			!strings.Contains(r.LastError, "secrets manager unavailable") {
			t.Errorf("row %s during the outage: %+v; want failed, retry in ≈30s, naming Secrets Manager", id, r)
		}
	}
	if !strings.Contains(all[throttled].LastError, "ThrottlingException") {
		t.Errorf("throttled row's last_error %q does not say so", all[throttled].LastError)
	}
	if rc.Calls() != 1 {
		t.Fatalf("provider called %d times, want once (before the outage)", rc.Calls())
	}

	// Back: moto restarts empty, so the secret is created again; the
	// retries are due (time passes) and complete.
	if err := m2.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.CreateSecret(t, api, ref, secretValue, org)
	if _, err := e.f.Pool.Exec(context.Background(), `update external_integration_outbox set next_attempt_at = now()
		where status = 'failed'`); err != nil {
		t.Fatal(err)
	}
	if s := e.dispatch(t, 15*time.Minute); s.Claimed != 3 {
		t.Fatalf("retries claimed: %+v", s)
	}
	e.drain(t, w)
	all = checkEveryRow(t, e.f.Pool)
	for _, id := range append(down, throttled) {
		if r := all[id]; r.Status != "completed" || r.Attempts != 2 {
			t.Errorf("row %s after recovery: %+v", id, r)
		}
	}
	for _, req := range rc.Requests() {
		if req.Header.Get("Authorization") != "Bearer "+token || !strings.Contains(req.Header.Get("X-Outbox-Signature"), "v1=") {
			t.Errorf("request without the credential: %v", req.Header)
		}
	}

	// The secret values never reached a log line or a column.
	logs := e.logs.String()
	if !strings.Contains(logs, "secrets manager unavailable") || !strings.Contains(logs, "credential fetched") {
		t.Errorf("the logs miss the outage or the fetches:\n%s", tail(logs, 3000))
	}
	mustNotContain(t, "the logs", logs, token, signing)
	mustNotContain(t, "the database", dumpText(t, e.f.Pool), token, signing)
}

// dumpText returns every text the outbox and conflict tables hold.
func dumpText(t *testing.T, db outbox.DB) string {
	t.Helper()
	var s string
	if err := db.QueryRow(context.Background(), `
		select coalesce((select string_agg(to_jsonb(o)::text, E'\n') from external_integration_outbox o), '') ||
			coalesce((select string_agg(to_jsonb(c)::text, E'\n') from external_integration_conflicts c), '')`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
