package faulttest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/testenv"
)

// expectRow is what one hostile row must end as.
type expectRow struct {
	status, conflict, lastError string // lastError: a substring
}

// checkRows asserts each row's end state and that last_error says why.
func checkRows(t *testing.T, e *env, want map[string]expectRow, what map[string]string) {
	t.Helper()
	all := checkEveryRow(t, e.f.Pool)
	for id, w := range want {
		r := all[id]
		if r.Status != w.status || r.ConflictType != w.conflict || !strings.Contains(r.LastError, w.lastError) {
			t.Errorf("%s: %s, conflict %q, last_error %q; want %s, conflict %q, last_error with %q",
				what[id], r.Status, r.ConflictType, r.LastError, w.status, w.conflict, w.lastError)
		}
	}
}

// TestBadPayloadOrConfigEndsInItsConflictWithoutACall: payload_json without
// a usable externalSupplierId and config_json without a usable https URL
// (production mode) are permanent errors with their conflict; the provider
// is never called.
func TestBadPayloadOrConfigEndsInItsConflictWithoutACall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := testenv.NewReceiver(t, testenv.Reply(200, `{}`))
	org := e.f.NewID(t)
	good := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
		Config: map[string]string{"url": rc.URL}})
	want := map[string]expectRow{}
	what := map[string]string{}

	for _, p := range []struct {
		payload string
		err     string
	}{
		{`{}`, "payload_json.externalSupplierId: is required"},
		{`{"externalSupplierId":null}`, "is required"},
		{`{"ExternalSupplierId":"SUP-1"}`, "is required"},
		{`{"externalsupplierid":"SUP-1"}`, "is required"},
		{`{"externalSupplierId":42}`, "must be a string"},
		{`{"externalSupplierId":true}`, "must be a string"},
		{`{"externalSupplierId":["SUP-1"]}`, "must be a string"},
		{`{"externalSupplierId":{"id":"SUP-1"}}`, "must be a string"},
		{`{"externalSupplierId":"   "}`, "must not be empty"},
		{`{"externalSupplierId":""}`, "must not be empty"},
		{`["SUP-1"]`, "payload_json: must be a JSON object"},
		{`"SUP-1"`, "payload_json: must be a JSON object"},
		{`null`, "payload_json: must be a JSON object"},
	} {
		id := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: good, Provider: "webhook",
			EntityID: e.f.PurchaseOrder(t, org, "", 1), Payload: json.RawMessage(p.payload)})
		want[id] = expectRow{"dead_letter", "payload_invalid", p.err}
		what[id] = "payload_json " + p.payload
	}
	for _, c := range []struct {
		provider, config, err string
	}{
		{"webhook", `{}`, "config_json.url: missing"},
		{"webhook", `[1]`, "config_json is not a JSON object"},
		{"webhook", `{"URL":"https://example.com/hook"}`, "config_json.url: missing"},
		{"webhook", `{"url":42}`, "config_json.url: not a string"},
		{"webhook", `{"url":""}`, "config_json.url: empty"},
		{"webhook", `{"url":"http://example.com/hook"}`, "config_json.url: must use https"},
		{"webhook", `{"url":"ftp://example.com/hook"}`, "config_json.url: scheme"},
		{"webhook", `{"url":"https://"}`, "config_json.url: not an absolute URL"},
		{"webhook", `{"url":"/relative/hook"}`, "config_json.url: not an absolute URL"},
		{"webhook", `{"url":"https://example.com:99999/"}`, "config_json.url: port"},
		{"sandbox", `{"answer":"nope"}`, "config_json.answer"},
		{"sandbox", `{"latencyMs":"5"}`, "config_json.latencyMs"},
		{"sandbox", `{"unknown":1}`, "unknown key"},
	} {
		conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: c.provider,
			Config: json.RawMessage(c.config)})
		id := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: c.provider, EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		want[id] = expectRow{"dead_letter", "configuration_invalid", c.err}
		what[id] = c.provider + " config_json " + c.config
	}
	// Production mode: https only, public targets only.
	prod := provider.NewWebhook(provider.WebhookConfig{Resolver: (&fakeDNS{}).resolver()})
	t.Cleanup(prod.CloseIdleConnections)
	e.dispatch(t, 15*time.Minute)
	e.drain(t, e.worker(t, workerOpts{providers: provider.Registry{provider.NameWebhook: prod, provider.NameSandbox: e.sandbox}}))

	checkRows(t, e, want, what)
	if rc.Calls() != 0 {
		t.Errorf("webhook receiver got %d requests", rc.Calls())
	}
}

// TestNonPublicWebhookTargetsAreRefusedBeforeConnecting runs the webhook in
// production mode against targets in every non-public range, as IP
// literals and as DNS names resolving there (a fake resolver: no DNS packet
// leaves the process): each is refused by the guard before connect(2) and
// ends as configuration_invalid. Loopback listeners on the targeted ports
// prove nothing connected; no other target is ever dialled.
func TestNonPublicWebhookTargetsAreRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l4, err := listenCounting("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.close()
	l6, err := listenCounting("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l6.close()
	a := netip.MustParseAddr
	dns := &fakeDNS{records: map[string][]netip.Addr{
		"metadata.hostile.test":   {a("169.254.169.254")},
		"ten.hostile.test":        {a("10.1.2.3")},
		"one72.hostile.test":      {a("172.16.0.9")},
		"one72-top.hostile.test":  {a("172.31.255.254")},
		"one92.hostile.test":      {a("192.168.10.1")},
		"loop.hostile.test":       {a("127.0.0.1")},
		"loop-other.hostile.test": {a("127.45.6.7")},
		"six.hostile.test":        {a("::1")},
		"ula.hostile.test":        {a("fd12:3456::1")},
		"fc.hostile.test":         {a("fc00::5")},
		"linklocal6.hostile.test": {a("fe80::1")},
		"mixed.hostile.test":      {a("10.0.0.1"), a("192.168.0.1"), a("fd00::1")},
	}}
	prod := provider.NewWebhook(provider.WebhookConfig{Timeout: 3 * time.Second, Resolver: dns.resolver()})
	t.Cleanup(prod.CloseIdleConnections)
	p4, p6 := l4.port(), l6.port()
	targets := []struct{ url, addr string }{ // addr: the refused address the error names
		{"https://169.254.169.254/latest/meta-data/iam/security-credentials/", "169.254.169.254"},
		{"https://10.0.0.1/hook", "10.0.0.1"},
		{"https://10.255.255.254/hook", "10.255.255.254"},
		{"https://172.16.0.1/hook", "172.16.0.1"},
		{"https://172.31.255.255/hook", "172.31.255.255"},
		{"https://192.168.0.1/hook", "192.168.0.1"},
		{"https://192.168.255.254/hook", "192.168.255.254"},
		{fmt.Sprintf("https://127.0.0.1:%d/hook", p4), "127.0.0.1"},
		{"https://127.1.2.3/hook", "127.1.2.3"},
		{fmt.Sprintf("https://[::1]:%d/hook", p6), "::1"},
		{"https://[fc00::1]/hook", "fc00::1"},
		{"https://[fdff:ffff::1]/hook", "fdff:ffff::1"},
		{"https://[::ffff:169.254.169.254]/hook", "169.254.169.254"},
		{"https://[::ffff:10.0.0.1]/hook", "10.0.0.1"},
		{"https://[64:ff9b::a9fe:a9fe]/hook", "64:ff9b::a9fe:a9fe"}, // NAT64 of 169.254.169.254
		{"https://0.0.0.0/hook", "0.0.0.0"},
		{fmt.Sprintf("https://localhost:%d/hook", p4), "127.0.0.1"}, // /etc/hosts
		{"https://metadata.hostile.test/latest/meta-data/", "169.254.169.254"},
		{"https://ten.hostile.test/hook", "10.1.2.3"},
		{"https://one72.hostile.test/hook", "172.16.0.9"},
		{"https://one72-top.hostile.test/hook", "172.31.255.254"},
		{"https://one92.hostile.test/hook", "192.168.10.1"},
		{fmt.Sprintf("https://loop.hostile.test:%d/hook", p4), "127.0.0.1"},
		{"https://loop-other.hostile.test/hook", "127.45.6.7"},
		{fmt.Sprintf("https://six.hostile.test:%d/hook", p6), "::1"},
		{"https://ula.hostile.test/hook", "fd12:3456::1"},
		{"https://fc.hostile.test/hook", "fc00::5"},
		{"https://linklocal6.hostile.test/hook", "fe80::1"},
		{"https://mixed.hostile.test/hook", "10.0.0.1"}, // every address refused; the first is named
	}
	org := e.f.NewID(t)
	want := map[string]expectRow{}
	what := map[string]string{}
	for _, tg := range targets {
		conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
			Config: map[string]string{"url": tg.url}})
		id := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "webhook", EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		want[id] = expectRow{"dead_letter", "configuration_invalid", "non-public address (" + tg.addr + "), refused"}
		what[id] = tg.url
	}
	e.dispatch(t, 15*time.Minute)
	e.drain(t, e.worker(t, workerOpts{providers: provider.Registry{provider.NameWebhook: prod}}))

	checkRows(t, e, want, what)
	if n := l4.accepted.Load() + l6.accepted.Load(); n != 0 {
		t.Errorf("loopback listeners accepted %d connections", n)
	}
	if dns.queries.Load() == 0 {
		t.Error("the DNS names were never resolved through the fake resolver")
	}
}

// TestRedirectsAreNotFollowed: a webhook answering 3xx ends as
// provider_rejected naming the redirect; the Location is never requested
// (local mode, so the first hop can be a loopback receiver).
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	target := testenv.NewReceiver(t, testenv.Reply(200, `{"id":"followed"}`))
	org := e.f.NewID(t)
	want := map[string]expectRow{}
	what := map[string]string{}
	for _, status := range []int{301, 302, 303, 307, 308} {
		rc := testenv.NewReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/stolen?token=abc", status)
		})
		conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
			Config: map[string]string{"url": rc.URL}})
		id := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "webhook", EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		want[id] = expectRow{"dead_letter", "provider_rejected", fmt.Sprintf("webhook answered %d: redirect not followed", status)}
		what[id] = fmt.Sprint("redirect ", status)
	}
	e.dispatch(t, 15*time.Minute)
	e.drain(t, e.worker(t, workerOpts{}))
	checkRows(t, e, want, what)
	if target.Calls() != 0 {
		t.Errorf("the redirect target got %d requests", target.Calls())
	}
	for id := range want {
		if r := rows(t, e.f.Pool)[id]; strings.Contains(r.LastError, "stolen") || strings.Contains(r.LastError, "token=") {
			t.Errorf("last_error quotes the Location's path or query: %q", r.LastError)
		}
	}
}

// countingSecrets counts the Secrets Manager calls per SecretId.
type countingSecrets struct {
	credential.SecretsAPI
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingSecrets) note(id *string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[*id]++
}

func (c *countingSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, o ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.note(in.SecretId)
	return c.SecretsAPI.GetSecretValue(ctx, in, o...)
}

func (c *countingSecrets) DescribeSecret(ctx context.Context, in *secretsmanager.DescribeSecretInput, o ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error) {
	c.note(in.SecretId)
	return c.SecretsAPI.DescribeSecret(ctx, in, o...)
}

// TestCredentialReferencesOutsideTheTenantAreRefused goes through the worker
// with the prefix given as a full ARN prefix (region and account pinned):
// references outside it make no AWS call; a secret tagged for another
// organization or holding malformed JSON is read and refused. Every one ends
// as credential_rejected without a provider call, and no secret value
// reaches a column or a log line.
func TestCredentialReferencesOutsideTheTenantAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := secretsmanager.NewFromConfig(moto.AWSConfig())
	sm := &countingSecrets{SecretsAPI: api, calls: map[string]int{}}
	resolver, err := credential.NewResolver(sm, credential.ResolverConfig{Region: "us-east-1", Logger: e.log,
		Prefix: "arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/"})
	if err != nil {
		t.Fatal(err)
	}
	rc := testenv.NewReceiver(t, testenv.Reply(200, `{}`))
	org, other := e.f.NewID(t), e.f.NewID(t)

	foreignToken := "foreign-" + rand32()
	malformed := `{"token":"half-` + rand32() + `"`
	outside, _ := testenv.CreateSecret(t, api, strings.Replace(testenv.SecretName(t, "-outside"), "integrations/", "billing/", 1),
		`{"token":"billing-`+rand32()+`"}`, org)
	foreign, _ := testenv.CreateSecret(t, api, testenv.SecretName(t, "-foreign"), `{"token":"`+foreignToken+`"}`, other)
	broken, _ := testenv.CreateSecret(t, api, testenv.SecretName(t, "-broken"), malformed, org)
	notString, _ := testenv.CreateSecret(t, api, testenv.SecretName(t, "-notstring"), `{"token":12345,"signingSecret":"x"}`, org)
	cases := []struct {
		ref, why, err string
		noAWS         bool // refused on its text alone
	}{
		{outside, "outside the prefix", "outside CREDENTIAL_REFERENCE_PREFIX", true},
		{"arn:aws:secretsmanager:us-east-1:999999999999:secret:integrations/x", "another account", "account", true},
		{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:integrations/x", "another region", "region", true},
		{"arn:aws-cn:secretsmanager:us-east-1:123456789012:secret:integrations/x", "another partition", "partition", true},
		{"arn:aws:s3:us-east-1:123456789012:secret:integrations/x", "not a secret ARN", "not of a Secrets Manager secret", true},
		{"integrations/../billing/x", "path traversal", `".."`, true},
		{"integrations/x\nfoo", "a newline", "whitespace", true},
		{foreign, "tagged for another organization", "tagged for another organization", false},
		{broken, "malformed JSON", "not a JSON object", false},
		{notString, "token not a string", "is not a string", false},
		{testenv.SecretName(t, "-missing"), "missing", "ResourceNotFoundException", false},
	}
	want := map[string]expectRow{}
	what := map[string]string{}
	for _, c := range cases {
		conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
			CredentialReference: c.ref, Config: map[string]string{"url": rc.URL}})
		id := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "webhook", EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		want[id] = expectRow{"dead_letter", "credential_rejected", c.err}
		what[id] = c.why
	}
	e.dispatch(t, 15*time.Minute)
	e.drain(t, e.worker(t, workerOpts{creds: resolver}))

	checkRows(t, e, want, what)
	if rc.Calls() != 0 {
		t.Errorf("provider called %d times with refused credentials", rc.Calls())
	}
	sm.mu.Lock()
	for _, c := range cases {
		if c.noAWS && sm.calls[c.ref] != 0 {
			t.Errorf("%s: %d Secrets Manager calls for a reference refused on its text", c.why, sm.calls[c.ref])
		}
	}
	sm.mu.Unlock()
	secrets := []string{foreignToken, malformed[len(`{"token":"`):]}
	mustNotContain(t, "the database", dumpText(t, e.f.Pool), secrets...)
	mustNotContain(t, "the logs", e.logs.String(), secrets...)
}

func rand32() string { return rand.Text() }
