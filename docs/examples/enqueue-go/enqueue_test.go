package enqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	enqueue "integration-outbox/docs/examples/enqueue-go"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}

// fencedBlock returns the body of the first ``` block of the language after
// marker in docs/producers.md.
func fencedBlock(t *testing.T, marker, lang string) string {
	t.Helper()
	doc, err := os.ReadFile("../../producers.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	at := strings.Index(text, marker)
	if at < 0 {
		t.Fatalf("docs/producers.md has no %q", marker)
	}
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?\n)```").FindStringSubmatch(text[at:])
	if m == nil {
		t.Fatalf("docs/producers.md has no ```%s block after %q", lang, marker)
	}
	return m[1]
}

func TestDocGoExampleIsVerbatim(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("enqueue.go")
	if err != nil {
		t.Fatal(err)
	}
	if got := fencedBlock(t, "`docs/examples/enqueue-go/enqueue.go`:", "go"); got != string(file) {
		t.Errorf("docs/producers.md's Go example differs from docs/examples/enqueue-go/enqueue.go:\n%s", got)
	}
}

func TestDocTypeScriptExampleIsVerbatim(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("../enqueue-ts/enqueue.ts")
	if err != nil {
		t.Fatal(err)
	}
	if got := fencedBlock(t, "`docs/examples/enqueue-ts/enqueue.ts`", "ts"); got != string(file) {
		t.Errorf("docs/producers.md's TypeScript example differs from docs/examples/enqueue-ts/enqueue.ts:\n%s", got)
	}
}

func TestReadmeLinksProducersDocOnItsFirstScreen(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(readme), "\n", 26)
	if !strings.Contains(strings.Join(lines[:min(25, len(lines))], "\n"), "(docs/producers.md)") {
		t.Error("README.md does not link docs/producers.md in its first 25 lines")
	}
}

// The ids the doc's SQL example uses.
const (
	docOrg  = "11111111-1111-4111-8111-111111111111"
	docConn = "22222222-2222-4222-8222-222222222222"
	docPO   = "33333333-3333-4333-8333-333333333333"
)

func TestDocSQLExampleRuns(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	if _, err := f.Pool.Exec(ctx, `insert into integration_connections (id, organization_id, provider) values ($1, $2, 'webhook')`, docConn, docOrg); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pool.Exec(ctx, `insert into purchase_orders (id, organization_id, status) values ($1, $2, 'draft')`, docPO, docOrg); err != nil {
		t.Fatal(err)
	}
	block := fencedBlock(t, "<!-- sql-example -->", "sql")
	for range 2 { // a replay enqueues nothing more
		if _, err := f.Pool.Exec(ctx, block); err != nil {
			t.Fatalf("the doc's SQL example: %v\n%s", err, block)
		}
	}
	if n := f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1 and local_entity_id = $2
		and status = 'queued' and provider = 'webhook' and payload_json = '{"externalSupplierId": "SUP-1"}'
		and idempotency_key = 'purchase-order-approved:' || $2`, docOrg, docPO); n != 1 {
		t.Errorf("%d queued rows after the example ran twice, want 1", n)
	}
	if n := f.Count(t, `select count(*) from purchase_orders where id = $1 and status = 'approved'`, docPO); n != 1 {
		t.Error("the example's business change did not commit")
	}
}

// recordingInvoker stands in for *lambda.Client and keeps what it was asked.
type recordingInvoker struct {
	mu    sync.Mutex
	calls []*lambda.InvokeInput
	err   error
	// onInvoke runs at each invoke (to check what the database shows then).
	onInvoke func()
}

func (r *recordingInvoker) Invoke(_ context.Context, in *lambda.InvokeInput, _ ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, in)
	if r.onInvoke != nil {
		r.onInvoke()
	}
	if r.err != nil {
		return nil, r.err
	}
	return &lambda.InvokeOutput{StatusCode: 202}, nil
}

func TestGoExampleEnqueuesAndWakesTheDispatcher(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	org := f.NewID(t)
	a := enqueue.Approval{OrganizationID: org, ConnectionID: f.Connection(t, testenv.ConnectionOpts{OrganizationID: org}),
		PurchaseOrderID: f.PurchaseOrder(t, org, "", 2), ExternalSupplierID: "SUP-7"}
	// The wake-up comes after the commit: when it is sent, another
	// connection (the dispatcher's) already sees the row.
	inv := &recordingInvoker{onInvoke: func() {
		if n := f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1`, org); n != 1 {
			t.Errorf("at the wake-up other connections see %d rows, want the committed 1", n)
		}
	}}
	const arn = "arn:aws:lambda:eu-west-1:123456789012:function:outbox-dispatch"
	id, err := enqueue.ApprovePurchaseOrder(ctx, f.Pool, inv, arn, a)
	if err != nil {
		t.Fatal(err)
	}
	// A retried request: same row, nothing new; the wake-up is harmless.
	inv.err = fmt.Errorf("injected: Lambda throttled")
	if again, err := enqueue.ApprovePurchaseOrder(ctx, f.Pool, inv, arn, a); err != nil || again != id {
		t.Errorf("retry: %s %v, want %s and no error even when the wake-up fails", again, err, id)
	}
	if r := f.Row(t, id); r.Status != "queued" || r.AttemptCount != 0 {
		t.Errorf("row %+v", r)
	}
	if n := f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1`, org); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
	if n := f.Count(t, `select count(*) from purchase_orders where id = $1 and status = 'approved'`, a.PurchaseOrderID); n != 1 {
		t.Error("purchase order not approved")
	}
	if len(inv.calls) != 2 {
		t.Fatalf("%d invokes, want one per approval", len(inv.calls))
	}
	call := inv.calls[0]
	if aws.ToString(call.FunctionName) != arn || call.InvocationType != types.InvocationTypeEvent ||
		string(call.Payload) != fmt.Sprintf(`{"organizationId":%q}`, org) {
		t.Errorf("invoke %s %s %s", aws.ToString(call.FunctionName), call.InvocationType, call.Payload)
	}

	// The real dispatcher accepts the wake-up event and sends the row.
	sqsClient := sqs.NewFromConfig(moto.AWSConfig())
	queue := testenv.CreateQueue(t, sqsClient, nil)
	d, err := dispatch.New(outbox.NewStore(f.Pool), sqsClient, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": queue}, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Handle(ctx, call.Payload)
	if err != nil || s.Claimed != 1 || s.Dispatched != 1 {
		t.Fatalf("wake-up run: %+v %v", s, err)
	}
	got, err := sqsClient.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("queue: %v %v", got, err)
	}
	if m, err := message.Decode(aws.ToString(got.Messages[0].Body)); err != nil || m.OutboxID != id || m.OrganizationID != org {
		t.Errorf("message %+v %v, want row %s", m, err, id)
	}
}

// TestTypeScriptExampleRunsOnNode compiles the TypeScript example with tsc and
// runs it on node with node-postgres against the test database (the Lambda
// client is a stand-in that records the command). It needs node, npm and the
// npm registry (packages are cached in the user cache directory); without
// them, or with -short, it is skipped.
func TestTypeScriptExampleRunsOnNode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: not installing npm packages")
	}
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not found", bin)
		}
	}
	dir := npmWorkspace(t)
	src, err := os.ReadFile("../enqueue-ts/enqueue.ts")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"enqueue.ts": string(src),
		"tsconfig.json": `{"compilerOptions": {"target": "es2022", "module": "commonjs", "strict": true,
			"esModuleInterop": true, "skipLibCheck": true, "outDir": "out"}, "files": ["enqueue.ts"]}`,
		"driver.js": `const { Pool } = require('pg');
const { approvePurchaseOrder } = require('./out/enqueue.js');
(async () => {
  const [url, organizationId, connectionId, purchaseOrderId] = process.argv.slice(2);
  const pool = new Pool({ connectionString: url });
  const calls = [];
  const lambda = { send: async (cmd) => { calls.push({ ...cmd.input, Payload: new TextDecoder().decode(cmd.input.Payload) }); return { StatusCode: 202 }; } };
  const a = { organizationId, connectionId, purchaseOrderId, externalSupplierId: 'SUP-TS' };
  const ids = [await approvePurchaseOrder(pool, lambda, 'dispatch-arn', a), await approvePurchaseOrder(pool, lambda, 'dispatch-arn', a)];
  let refused = null;
  try { await approvePurchaseOrder(pool, lambda, 'dispatch-arn', { ...a, connectionId: organizationId }); } catch (e) { refused = { code: e.code, column: e.column }; }
  await pool.end();
  console.log(JSON.stringify({ ids, calls, refused }));
})().catch((e) => { console.error(e); process.exit(1); });
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := runIn(work, 2*time.Minute, "node", "node_modules/typescript/bin/tsc", "-p", "."); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}

	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook"})
	po := f.PurchaseOrder(t, org, "", 1)
	out, err := runIn(work, 2*time.Minute, "node", "driver.js", f.URL, org, conn, po)
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var res struct {
		IDs   []string `json:"ids"`
		Calls []struct {
			FunctionName, InvocationType, Payload string
		} `json:"calls"`
		Refused *struct{ Code, Column string } `json:"refused"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("driver output %s: %v", out, err)
	}
	if len(res.IDs) != 2 || res.IDs[0] != res.IDs[1] {
		t.Errorf("ids %v, want the same row twice", res.IDs)
	}
	if n := f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1 and status = 'queued'
		and payload_json ->> 'externalSupplierId' = 'SUP-TS' and idempotency_key = 'purchase-order-approved:' || $2`, org, po); n != 1 {
		t.Errorf("%d rows enqueued by the TypeScript example, want 1", n)
	}
	if len(res.Calls) != 2 || res.Calls[0].InvocationType != "Event" || res.Calls[0].FunctionName != "dispatch-arn" ||
		res.Calls[0].Payload != fmt.Sprintf(`{"organizationId":%q}`, org) {
		t.Errorf("invokes %+v", res.Calls)
	}
	if res.Refused == nil || res.Refused.Code != "23503" || res.Refused.Column != "integration_connection_id" {
		t.Errorf("a foreign connection: %+v, want 23503 naming integration_connection_id", res.Refused)
	}
}

// npmPackages are what the TypeScript example and its compilation need.
var npmPackages = []string{"pg@8", "@types/pg@8", "typescript@5", "@aws-sdk/client-lambda@3"}

// npmWorkspace installs npmPackages once into the user cache directory and
// returns it; it skips the test when npm cannot install them. The install goes
// to a private directory renamed into place, so an interrupted install leaves
// nothing half-written behind.
func npmWorkspace(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache directory: %v", err)
	}
	parent := filepath.Join(cache, "integration-outbox")
	dir := filepath.Join(parent, "producers-ts-example")
	marker := filepath.Join(dir, "node_modules", "@aws-sdk", "client-lambda", "package.json")
	if _, err := os.Stat(marker); err == nil {
		return dir
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Skipf("creating %s: %v", parent, err)
	}
	tmp, err := os.MkdirTemp(parent, "producers-ts-example-*")
	if err != nil {
		t.Skipf("creating a directory in %s: %v", parent, err)
	}
	defer os.RemoveAll(tmp) // gone after the rename
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error"}, npmPackages...)
	if out, err := runIn(tmp, 5*time.Minute, "npm", args...); err != nil {
		t.Skipf("npm install %v failed (registry unreachable?): %v\n%s", npmPackages, err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		return dir // another test run finished first
	}
	os.RemoveAll(dir) // a leftover without the packages
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(marker); statErr == nil {
			return dir
		}
		t.Fatalf("moving the npm install into %s: %v", dir, err)
	}
	return dir
}

func runIn(dir string, timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.String()...), err
	}
	return out, nil
}
