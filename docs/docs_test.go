// Package docs_test holds the tests that keep docs/receivers.md true: a real
// request, produced by the real pipeline (outbox row in PostgreSQL, secret
// in Secrets Manager on moto, push worker, webhook provider), is validated
// against receivers.schema.json and verified by the doc's own Go, Python and
// Node snippets.
package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/supplier"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}

// The connection's signing secrets during a rotation: the new one in the
// Standard Webhooks form, the old one a plain string.
const (
	newSecret     = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	oldSecret     = "old-plain-signing-secret"
	foreignSecret = "whsec_c29tZW9uZSBlbHNlJ3Mga2V5IQ=="
)

// pushRealRequest runs one push_purchase_order command through the real
// worker and webhook provider to a local receiver and returns the request
// it received. The receiver answers 201 {"id":"SUP-ORDER-1"}.
func pushRealRequest(t *testing.T) testenv.Request {
	t.Helper()
	ctx := context.Background()
	f := pg.NewDB(t)
	org := f.NewID(t)

	srv := testenv.NewReceiver(t, testenv.Reply(http.StatusCreated, `{"id":"SUP-ORDER-1"}`))

	sm := secretsmanager.NewFromConfig(moto.AWSConfig())
	secret := fmt.Sprintf(`{"token":"doc-token","signingSecret":%q,"signingSecrets":[%q,%q]}`, oldSecret, newSecret, oldSecret)
	name, _ := testenv.CreateSecret(t, sm, testenv.SecretName(t, ""), secret, org)
	resolver, err := credential.NewResolver(sm, credential.ResolverConfig{Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}

	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: provider.NameWebhook,
		CredentialReference: name, Config: map[string]string{"url": srv.URL + "/orders?source=outbox"}})
	po := f.PurchaseOrder(t, org, "", 2)
	// A line as hosts also have them: a fractional quantity, unknown stock item.
	if _, err := f.Pool.Exec(ctx, `insert into purchase_order_lines (purchase_order_id, ordered_quantity, purchase_unit_code,
		normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot, created_at)
		values ($1, 1.500, 'kg', 'g', 1000, null, now() + interval '1 hour')`, po); err != nil {
		t.Fatal(err)
	}
	id := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: provider.NameWebhook,
		EntityID: po, IdempotencyKey: "po-" + po + "-v1"})

	store := outbox.NewStore(f.Pool)
	claims, err := store.Claim(ctx, outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: 15 * time.Minute, IDs: []string{id}})
	if err != nil || len(claims) != 1 {
		t.Fatalf("Claim = %d claims, %v; want 1", len(claims), err)
	}
	c := claims[0]
	body, err := message.Message{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
		CommandType: c.CommandType, ClaimToken: c.ClaimToken}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	webhook := provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true})
	t.Cleanup(webhook.CloseIdleConnections)
	worker, err := push.New(store, resolver, purchaseorder.NewCommand(f.Pool), push.Config{Providers: provider.NewRegistry(webhook)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: body}}}); err != nil {
		t.Fatalf("Handle: %v", err)
	}

	row := f.Row(t, id)
	if row.Status != "completed" || row.ProviderReference == nil || *row.ProviderReference != "SUP-ORDER-1" {
		t.Fatalf("row = %+v, want completed with provider reference SUP-ORDER-1", row)
	}
	got := srv.Requests()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	return got[0]
}

func TestReceiverDocAgainstARealRequest(t *testing.T) {
	t.Parallel()
	req := pushRealRequest(t)
	doc, err := os.ReadFile("receivers.md")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("headers as documented", func(t *testing.T) {
		t.Parallel()
		h := req.Header
		var body struct{ IdempotencyKey string }
		if err := json.Unmarshal(req.Raw, &body); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{
			"Content-Type":    "application/json",
			"Accept":          "application/json",
			"User-Agent":      "integration-outbox-webhook/1",
			"Idempotency-Key": body.IdempotencyKey,
			"webhook-id":      body.IdempotencyKey,
			"Authorization":   "Bearer doc-token",
		} {
			if got := h.Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
			if !bytes.Contains(doc, []byte("`"+name+"`")) {
				t.Errorf("receivers.md does not document header %s", name)
			}
		}
		ts := h.Get("webhook-timestamp")
		if !strings.HasPrefix(h.Get("X-Outbox-Signature"), "t="+ts+",v1=") {
			t.Errorf("X-Outbox-Signature = %q, want t=%s,v1=…", h.Get("X-Outbox-Signature"), ts)
		}
		// Two secrets (newest first, the duplicate dropped): two signatures each.
		if n := strings.Count(h.Get("X-Outbox-Signature"), ",v1="); n != 2 {
			t.Errorf("X-Outbox-Signature holds %d signatures, want 2", n)
		}
		if n := len(strings.Fields(h.Get("webhook-signature"))); n != 2 {
			t.Errorf("webhook-signature holds %d signatures, want 2", n)
		}
	})

	t.Run("body matches the JSON Schema", func(t *testing.T) {
		t.Parallel()
		schema := compileSchema(t)
		if err := schema.Validate(mustInstance(t, req.Raw)); err != nil {
			t.Fatalf("the real body does not match receivers.schema.json: %v\n%s", err, req.Raw)
		}
		// The schema is not vacuous: it refuses what a receiver must not get.
		for name, mutate := range map[string]func(body, po, item map[string]any){
			"no idempotencyKey":   func(body, _, _ map[string]any) { delete(body, "idempotencyKey") },
			"other command type":  func(body, _, _ map[string]any) { body["commandType"] = "cancel_purchase_order" },
			"no items":            func(_, po, _ map[string]any) { delete(po, "items") },
			"id that is not uuid": func(_, po, _ map[string]any) { po["id"] = "PO-1" },
			"quantity as string":  func(_, _, item map[string]any) { item["quantity"] = "2" },
			"fractional minor":    func(_, _, item map[string]any) { item["unitPriceMinor"] = 19.99 },
		} {
			var body map[string]any
			if err := json.Unmarshal(req.Raw, &body); err != nil {
				t.Fatal(err)
			}
			po := body["purchaseOrder"].(map[string]any)
			mutate(body, po, po["items"].([]any)[0].(map[string]any))
			bad, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(mustInstance(t, bad)); err == nil {
				t.Errorf("schema accepts a body with %s", name)
			}
		}
		for _, want := range []string{`"quantity":1.500`, `"stockItemId":null`, `"unitPriceMinor":null`, `"locationId":null`} {
			if !bytes.Contains(req.Raw, []byte(want)) {
				t.Errorf("the real body lacks %s (the fixture line with exact decimals and nulls): %s", want, req.Raw)
			}
		}
	})

	for _, lang := range []struct {
		name, marker string
		run          func(t *testing.T, snippet, dir string) string
	}{
		{"go", "snippet:go", runGoSnippet},
		{"python", "snippet:python", runPythonSnippet},
		{"node", "snippet:node", runNodeSnippet},
	} {
		t.Run(lang.name+" snippet verifies", func(t *testing.T) {
			t.Parallel()
			snippet := extractSnippet(t, doc, lang.marker)
			dir := writeCases(t, req)
			got := lang.run(t, snippet, dir)
			if got != wantVerdicts {
				t.Errorf("%s snippet verdicts:\n%s\nwant:\n%s", lang.name, got, wantVerdicts)
			}
		})
	}
}

// TestReceiverDocAgainstARealSupplierRequest: one push_supplier command
// through the real worker and webhook provider reaches a local receiver
// signed as the purchase order is, with the body receivers.md describes;
// the receiver's id becomes the row's provider reference.
func TestReceiverDocAgainstARealSupplierRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	org, supplierID := f.NewID(t), f.NewID(t)
	srv := testenv.NewReceiver(t, testenv.Reply(http.StatusCreated, `{"id":"SUP-7"}`))

	sm := secretsmanager.NewFromConfig(moto.AWSConfig())
	name, _ := testenv.CreateSecret(t, sm, testenv.SecretName(t, ""), fmt.Sprintf(`{"token":"doc-token","signingSecret":%q}`, newSecret), org)
	resolver, err := credential.NewResolver(sm, credential.ResolverConfig{Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: provider.NameWebhook,
		CredentialReference: name, Config: map[string]string{"url": srv.URL + "/suppliers"}})
	var id string
	if err := f.Pool.QueryRow(ctx, `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status)
		values ($1, $2, 'webhook', 'push_supplier', 'supplier', $3::uuid, $4, 'sup-' || $3::text || '-v1', 'queued')
		returning id::text`, org, conn, supplierID,
		`{"name":"Acme \"Fresh\" Supplies","email":"orders@acme.example","addressLines":["Unit 4",""],"currencyCode":"GBP","code":"SUP-001"}`,
	).Scan(&id); err != nil {
		t.Fatal(err)
	}

	store := outbox.NewStore(f.Pool)
	claims, err := store.Claim(ctx, outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: 15 * time.Minute, IDs: []string{id}})
	if err != nil || len(claims) != 1 {
		t.Fatalf("Claim = %d claims, %v; want 1", len(claims), err)
	}
	c := claims[0]
	body, err := message.Message{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
		CommandType: c.CommandType, ClaimToken: c.ClaimToken}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	webhook := provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true})
	t.Cleanup(webhook.CloseIdleConnections)
	worker, err := push.New(store, resolver, supplier.NewCommand(f.Pool), push.Config{Providers: provider.NewRegistry(webhook)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: body}}}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if row := f.Row(t, id); row.Status != "completed" || row.ProviderReference == nil || *row.ProviderReference != "SUP-7" {
		t.Fatalf("row = %+v, want completed with provider reference SUP-7", row)
	}
	got := srv.Requests()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	req := got[0]
	if err := compileSchema(t).Validate(mustInstance(t, req.Raw)); err != nil {
		t.Fatalf("the real supplier body does not match receivers.schema.json: %v\n%s", err, req.Raw)
	}
	want := `{"commandType":"push_supplier","idempotencyKey":"sup-` + supplierID + `-v1","supplier":{"id":"` + supplierID +
		`","name":"Acme \"Fresh\" Supplies","email":"orders@acme.example","phone":"","addressLines":["Unit 4"],"city":"",` +
		`"postalCode":"","country":"","taxNumber":"","currencyCode":"GBP","code":"SUP-001"}}`
	if string(req.Raw) != want {
		t.Errorf("body\n%s\nwant\n%s", req.Raw, want)
	}
	doc, err := os.ReadFile("receivers.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte(`"commandType":"push_supplier"`)) {
		t.Error("receivers.md shows no push_supplier body")
	}
	ts, err := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Unix(ts, 0)
	if got, want := req.Header.Get("X-Outbox-Signature"), provider.OutboxSignature([]string{newSecret}, sent, req.Raw); got != want {
		t.Errorf("X-Outbox-Signature = %q, want %q", got, want)
	}
	if req.Header.Get("Idempotency-Key") != "sup-"+supplierID+"-v1" || req.Header.Get("webhook-id") != req.Header.Get("Idempotency-Key") ||
		req.Header.Get("Authorization") != "Bearer doc-token" || req.Header.Get("webhook-signature") == "" {
		t.Errorf("headers = %v", req.Header)
	}
}

// verifyCase is one check the snippet harnesses run.
type verifyCase struct {
	Name    string   `json:"name"`
	Secrets []string `json:"secrets"`
	Now     int64    `json:"now"`
	Tamper  bool     `json:"tamper"` // append a space to the body
}

// wantVerdicts is what every harness must print for the cases of writeCases.
const wantVerdicts = `new-secret standard=ok outbox=ok
old-secret standard=ok outbox=ok
receiver-holds-both standard=ok outbox=ok
foreign-secret standard=fail outbox=fail
tampered-body standard=fail outbox=fail
replayed-an-hour-later standard=fail outbox=fail
from-the-future standard=fail outbox=fail
`

// writeCases writes the request (body.bin, headers.json with lower-case
// names) and cases.json into a fresh directory.
func writeCases(t *testing.T, req testenv.Request) string {
	t.Helper()
	dir := t.TempDir()
	ts, err := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		t.Fatalf("webhook-timestamp: %v", err)
	}
	headers := map[string]string{}
	for k, v := range req.Header {
		headers[strings.ToLower(k)] = v[0]
	}
	cases := []verifyCase{
		{Name: "new-secret", Secrets: []string{newSecret}, Now: ts + 5},
		{Name: "old-secret", Secrets: []string{oldSecret}, Now: ts},
		{Name: "receiver-holds-both", Secrets: []string{foreignSecret, oldSecret, newSecret}, Now: ts + 299},
		{Name: "foreign-secret", Secrets: []string{foreignSecret}, Now: ts},
		{Name: "tampered-body", Secrets: []string{newSecret, oldSecret}, Now: ts, Tamper: true},
		{Name: "replayed-an-hour-later", Secrets: []string{newSecret, oldSecret}, Now: ts + 3600},
		{Name: "from-the-future", Secrets: []string{newSecret, oldSecret}, Now: ts - 600},
	}
	for name, v := range map[string]any{"headers.json": headers, "cases.json": cases} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "body.bin"), req.Raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// extractSnippet returns the fenced code block that follows
// "<!-- marker -->" in doc.
func extractSnippet(t *testing.T, doc []byte, marker string) string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + " -->\n```[a-z]+\n(.*?)\n```\n")
	m := re.FindSubmatch(doc)
	if m == nil {
		t.Fatalf("receivers.md has no fenced block after <!-- %s -->", marker)
	}
	return string(m[1]) + "\n"
}

func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return string(out)
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("%s is not installed", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

const goHarness = `package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"example.com/verify/webhookverify"
)

func main() {
	dir := os.Args[1]
	body, _ := os.ReadFile(filepath.Join(dir, "body.bin"))
	var names map[string]string
	var cases []struct {
		Name    string
		Secrets []string
		Now     int64
		Tamper  bool
	}
	for file, v := range map[string]any{"headers.json": &names, "cases.json": &cases} {
		raw, _ := os.ReadFile(filepath.Join(dir, file))
		if err := json.Unmarshal(raw, v); err != nil {
			panic(err)
		}
	}
	h := http.Header{}
	for k, v := range names {
		h.Set(k, v)
	}
	verdict := func(err error) string {
		if err != nil {
			return "fail"
		}
		return "ok"
	}
	for _, c := range cases {
		b := body
		if c.Tamper {
			b = append(bytes.Clone(body), ' ')
		}
		now := time.Unix(c.Now, 0)
		fmt.Printf("%s standard=%s outbox=%s\n", c.Name,
			verdict(webhookverify.VerifyStandardWebhooks(h, b, c.Secrets, now)),
			verdict(webhookverify.VerifyOutboxSignature(h, b, c.Secrets, now)))
	}
}
`

func runGoSnippet(t *testing.T, snippet, dir string) string {
	t.Helper()
	gobin := lookPath(t, "go")
	mod := t.TempDir()
	files := map[string]string{
		"go.mod":                   "module example.com/verify\n\ngo 1.22\n",
		"main.go":                  goHarness,
		"webhookverify/webhook.go": snippet,
	}
	for name, text := range files {
		path := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(gobin, "run", ".", dir)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOWORK=off")
	return run(t, cmd)
}

const pythonHarness = `

if __name__ == "__main__":
    import json, os, sys
    d = sys.argv[1]
    with open(os.path.join(d, "body.bin"), "rb") as f:
        body = f.read()
    with open(os.path.join(d, "headers.json")) as f:
        headers = json.load(f)
    with open(os.path.join(d, "cases.json")) as f:
        cases = json.load(f)
    for c in cases:
        b = body + b" " if c["tamper"] else body
        verdicts = []
        for verify in (verify_standard_webhooks, verify_outbox_signature):
            try:
                verify(headers, b, c["secrets"], c["now"])
                verdicts.append("ok")
            except ValueError:
                verdicts.append("fail")
        print(f'{c["name"]} standard={verdicts[0]} outbox={verdicts[1]}')
`

func runPythonSnippet(t *testing.T, snippet, dir string) string {
	t.Helper()
	python := lookPath(t, "python3")
	script := filepath.Join(t.TempDir(), "docs_snippet.py")
	if err := os.WriteFile(script, []byte(snippet+pythonHarness), 0o600); err != nil {
		t.Fatal(err)
	}
	return run(t, exec.Command(python, "-I", script, dir))
}

const nodeHarness = `
const fs = require("node:fs");
const path = require("node:path");
const dir = process.argv[2];
const body = fs.readFileSync(path.join(dir, "body.bin"));
const headers = JSON.parse(fs.readFileSync(path.join(dir, "headers.json"), "utf8"));
for (const c of JSON.parse(fs.readFileSync(path.join(dir, "cases.json"), "utf8"))) {
  const b = c.tamper ? Buffer.concat([body, Buffer.from(" ")]) : body;
  const verdicts = [verifyStandardWebhooks, verifyOutboxSignature].map((verify) => {
    try { verify(headers, b, c.secrets, c.now); return "ok"; } catch { return "fail"; }
  });
  console.log(` + "`${c.name} standard=${verdicts[0]} outbox=${verdicts[1]}`" + `);
}
`

func runNodeSnippet(t *testing.T, snippet, dir string) string {
	t.Helper()
	node := lookPath(t, "node")
	script := filepath.Join(t.TempDir(), "docs_snippet.js")
	if err := os.WriteFile(script, []byte(snippet+nodeHarness), 0o600); err != nil {
		t.Fatal(err)
	}
	return run(t, exec.Command(node, script, dir))
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("receivers.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("receivers.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("receivers.schema.json")
	if err != nil {
		t.Fatalf("compiling receivers.schema.json: %v", err)
	}
	return s
}

func mustInstance(t *testing.T, body []byte) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestReferenceVerifiersStayOutOfBootstraps proves the test-only modules
// (the reference verifiers, the JSON Schema validator and the OAuth2
// server) reach no function.
func TestReferenceVerifiersStayOutOfBootstraps(t *testing.T) {
	t.Parallel()
	gobin := lookPath(t, "go")
	cmd := exec.Command(gobin, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./functions/...")
	cmd.Dir = ".."
	out := run(t, cmd)
	if !strings.Contains(out, "github.com/aws/aws-lambda-go") {
		t.Fatalf("go list -deps ./functions/... looks wrong (no aws-lambda-go):\n%s", out)
	}
	for _, module := range []string{
		"github.com/standard-webhooks/standard-webhooks/libraries",
		"github.com/stripe/stripe-go",
		"github.com/santhosh-tekuri/jsonschema",
		"github.com/ory/fosite", // the OAuth2 server of the credential tests
	} {
		if strings.Contains(out, module) {
			t.Errorf("a function depends on the test-only module %s", module)
		}
	}
}

// TestReadmeLinksReceiverDocFromItsFirstScreen keeps the doc findable.
func TestReadmeLinksReceiverDocFromItsFirstScreen(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(readme), "\n", 31)
	if !strings.Contains(strings.Join(lines[:min(30, len(lines))], "\n"), "(docs/receivers.md)") {
		t.Error("README.md does not link docs/receivers.md in its first 30 lines")
	}
}
