package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/rerun"
	"integration-outbox/internal/testenv"
)

// servers starts PostgreSQL for the first test that needs it.
var servers testenv.OnDemand

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithOnDemand(&servers))
}

// fixture is a fresh database holding one organization's rows in every
// state the views show.
type fixture struct {
	f    *testenv.Fixture
	env  map[string]string
	org  string
	conn string

	dead, failed, expired, accepted, overdue, completed string
	conflict                                            string
}

func setup(t *testing.T) fixture {
	t.Helper()
	f := servers.Postgres(t).NewDB(t)
	x := fixture{f: f, env: map[string]string{"DATABASE_URL": f.URL}, org: f.NewID(t)}
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: x.org})
	x.conn = conn
	cmd := func(status string, attempts int) string {
		return f.Command(t, testenv.CommandOpts{OrganizationID: x.org, ConnectionID: conn, Status: status, AttemptCount: attempts,
			CreatedAt: time.Now().Add(-time.Hour)})
	}
	x.dead, x.failed, x.expired = cmd("dead_letter", 10), cmd("failed", 2), cmd("processing", 1)
	x.accepted, x.overdue, x.completed = cmd("processing", 1), cmd("queued", 0), cmd("completed", 1)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := f.Pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`update external_integration_outbox set last_error = 'provider said 422: unknown supplier' where id = $1`, x.dead)
	exec(`insert into integration_outbox_connection_health (connection_id, organization_id, consecutive_failures,
		opened_count, open_until, opened_at) values ($1, $2, 5, 1, now() + interval '1 minute', now())`, conn, x.org)
	exec(`update external_integration_outbox set next_attempt_at = now() + interval '10 minutes', last_error = 'timeout' where id = $1`, x.failed)
	exec(`update external_integration_outbox set claim_token = gen_random_uuid(), lease_expires_at = now() - interval '1 minute' where id = $1`, x.expired)
	exec(`update external_integration_outbox set provider_status = 'accepted', updated_at = now() - interval '2 hours' where id = $1`, x.accepted)
	if err := f.Pool.QueryRow(context.Background(), `
		insert into external_integration_conflicts (organization_id, conflict_type, severity, summary, outbox_id)
		values ($1, 'provider_rejected', 'high', 'Purchase order push reached dead letter', $2) returning id::text`,
		x.org, x.dead).Scan(&x.conflict); err != nil {
		t.Fatal(err)
	}
	return x
}

type result struct {
	code           int
	stdout, stderr string
}

func (x fixture) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return x.env[k] }, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	x := fixture{env: map[string]string{}}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"list", "-status", "done"}, "-status: must be one of"},
		{[]string{"list", "-org", "acme"}, "-org: must be a uuid"},
		{[]string{"list", "-limit", "0"}, "-limit: must be from 1"},
		{[]string{"list", "-nope"}, "flag provided but not defined"},
		{[]string{"show", "11111111-1111-4111-8111-111111111111"}, "-org is required"},
		{[]string{"preview", "11111111-1111-4111-8111-111111111111"}, "-org is required"},
		{[]string{"preview", "-org", "11111111-1111-4111-8111-111111111111"}, "preview takes one outbox id"},
		{[]string{"show", "-org", "11111111-1111-4111-8111-111111111111"}, "show takes one outbox id"},
		{[]string{"show", "x", "-org", "11111111-1111-4111-8111-111111111111"}, "outbox id: must be a uuid"},
		{[]string{"stuck", "-accepted-for", "0s"}, "must be positive"},
		{[]string{"rerun", "payload.json"}, "unexpected argument"},
	} {
		r := x.run(t, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if r := x.run(t, "", "help"); r.code != exitOK || !strings.Contains(r.stderr, "outboxctl rerun") {
		t.Errorf("help: %+v", r)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	x := setup(t)
	other := x.f.NewID(t)
	otherRow := x.f.Command(t, testenv.CommandOpts{OrganizationID: other, ConnectionID: x.f.NewID(t), Status: "dead_letter"})

	r := x.run(t, "", "list", "-org", x.org)
	if r.code != exitOK || !strings.Contains(r.stdout, "ID") || !strings.Contains(r.stdout, "LAST ERROR") {
		t.Fatalf("list: %+v", r)
	}
	for _, id := range []string{x.dead, x.failed, x.expired, x.accepted, x.overdue, x.completed} {
		if !strings.Contains(r.stdout, id) {
			t.Errorf("list -org misses %s:\n%s", id, r.stdout)
		}
	}
	if strings.Contains(r.stdout, otherRow) {
		t.Errorf("list -org shows another organization's row:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "10 (0 left)") || !strings.Contains(r.stdout, "provider said 422") {
		t.Errorf("list does not say the dead row has no attempts left, or its error:\n%s", r.stdout)
	}

	r = x.run(t, "", "list", "-status", "dead_letter")
	if r.code != exitOK || !strings.Contains(r.stdout, x.dead) || !strings.Contains(r.stdout, otherRow) ||
		strings.Contains(r.stdout, x.failed) || lines(r.stdout) != 3 {
		t.Errorf("list -status dead_letter across organizations:\n%s", r.stdout)
	}
	r = x.run(t, "", "list", "-org", x.org, "-limit", "2")
	if lines(r.stdout) != 4 || !strings.Contains(r.stdout, "more rows match") {
		t.Errorf("list -limit 2:\n%s", r.stdout)
	}
	r = x.run(t, "", "list", "-org", x.org, "-connection", x.f.NewID(t))
	if strings.TrimSpace(r.stdout) != "no rows" {
		t.Errorf("list of an unknown connection:\n%s", r.stdout)
	}
}

func lines(s string) int { return len(strings.Split(strings.TrimSpace(s), "\n")) }

func TestShowRerunAndHistory(t *testing.T) {
	t.Parallel()
	x := setup(t)
	r := x.run(t, "", "show", x.dead, "-org", x.org)
	if r.code != exitOK {
		t.Fatalf("show: %+v", r)
	}
	for _, want := range []string{"organization_id", "integration_connection_id", "payload_json", `{"externalSupplierId": "SUP-1"}`,
		"dead_letter", "provider said 422: unknown supplier", "claim_token", "conflicts (1)", x.conflict, "provider_rejected",
		"history: reruns (0)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	// Another organization cannot see the row.
	if r := x.run(t, "", "show", x.dead, "-org", x.f.NewID(t)); r.code != exitError || !strings.Contains(r.stderr, "not found") {
		t.Errorf("show for another organization: %+v", r)
	}

	// Rerun from stdin: the dead row needs resetAttempts, the completed one is skipped.
	payload := `{"organizationId":"` + x.org + `","outboxIds":["` + x.dead + `","` + x.completed + `"],
		"resetAttempts":true,"reason":"supplier id corrected","requestedBy":"ops@example.com"}`
	r = x.run(t, payload, "rerun")
	if r.code != exitOK {
		t.Fatalf("rerun: %+v", r)
	}
	var res rerun.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("rerun output %q: %v", r.stdout, err)
	}
	if len(res.Requeued) != 1 || res.Requeued[0] != x.dead || len(res.Skipped) != 1 || res.Skipped[0].Reason != rerun.ReasonCompleted {
		t.Fatalf("rerun result %+v", res)
	}

	r = x.run(t, "", "show", "-org", x.org, x.dead)
	for _, want := range []string{"queued", "history: reruns (1)", "requeued", "ops@example.com", "supplier id corrected", "resolved"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show after the rerun lacks %q:\n%s", want, r.stdout)
		}
	}
	r = x.run(t, "", "show", x.completed, "-org", x.org)
	if !strings.Contains(r.stdout, "skipped: completed") {
		t.Errorf("history of the skipped row:\n%s", r.stdout)
	}

	// Rerun from a file, as a dry run.
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte(`{"organizationId":"`+x.org+`","filter":{"statuses":["failed"]},"dryRun":true,"reason":"check"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = x.run(t, "", "rerun", "-f", file)
	if r.code != exitOK || !strings.Contains(r.stdout, `"dryRun": true`) || !strings.Contains(r.stdout, x.failed) {
		t.Errorf("rerun -f dry run: %+v", r)
	}
}

func TestRerunRefusesWithoutChangingAnything(t *testing.T) {
	t.Parallel()
	x := setup(t)
	count := func() int {
		return x.f.Count(t, `select (select count(*) from external_integration_outbox where status = 'queued') +
			(select count(*) from external_integration_rerun_audit)`)
	}
	before := count()
	for _, tc := range []struct{ payload, want string }{
		{`{"organizationId":"` + x.org + `","outboxIds":["` + x.failed + `"],"reason":"r","dispatchNow":true}`, "dispatchNow:"},
		{`{"organizationId":"` + x.org + `","outboxIds":["` + x.failed + `"]}`, "reason:"},
		{`{"organizationId":"` + x.org + `","outboxIds":["` + x.failed + `"],"reason":"r","Limit":5}`, "Limit: unknown field"},
	} {
		r := x.run(t, tc.payload, "rerun")
		if r.code != exitError || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("rerun %s: %+v, want exit 1 naming %q", tc.payload, r, tc.want)
		}
	}
	if r := x.run(t, "", "rerun", "-f", filepath.Join(t.TempDir(), "missing.json")); r.code != exitError {
		t.Errorf("missing payload file: %+v", r)
	}
	if count() != before {
		t.Fatal("a refused rerun changed the database")
	}
}

func TestStuck(t *testing.T) {
	t.Parallel()
	x := setup(t)
	r := x.run(t, "", "stuck", "-org", x.org)
	if r.code != exitOK {
		t.Fatalf("stuck: %+v", r)
	}
	sections := strings.Split(r.stdout, "\n\n")
	if len(sections) != 7 {
		t.Fatalf("%d sections:\n%s", len(sections), r.stdout)
	}
	for i, want := range []struct{ head, id string }{
		{"expired lease", x.expired}, {"accepted by the provider", x.accepted},
		{"queued and due", x.overdue}, {"failed, waiting", x.failed},
	} {
		if !strings.Contains(sections[i], want.head) || !strings.Contains(sections[i], ": 1\n") || !strings.Contains(sections[i], want.id) {
			t.Errorf("section %d lacks %q with %s:\n%s", i, want.head, want.id, sections[i])
		}
	}
	if !strings.Contains(sections[4], "tripped or failing circuit") || !strings.Contains(sections[4], x.conn) ||
		!strings.Contains(sections[4], " open ") {
		t.Errorf("circuit section lacks the open circuit of %s:\n%s", x.conn, sections[4])
	}
	// Nothing disabled, unauthorized or failing here.
	if !strings.Contains(sections[5], "connections disabled") || !strings.HasSuffix(sections[5], ": 0") {
		t.Errorf("connections section:\n%s", sections[5])
	}
	// The accepted row has no claim token of ours: the old worker left it.
	if !strings.Contains(sections[6], "left in processing by the old worker") || !strings.Contains(sections[6], x.accepted) ||
		!strings.Contains(sections[6], "no follow-up time yet") {
		t.Errorf("old worker section lacks the accepted row %s:\n%s", x.accepted, sections[6])
	}
	// Thresholds move rows in and out.
	r = x.run(t, "", "stuck", "-org", x.org, "-accepted-for", "3h", "-overdue-for", "2h")
	if shown, _, _ := strings.Cut(r.stdout, "left in processing by the old worker"); strings.Contains(shown, x.accepted) || strings.Contains(r.stdout, x.overdue) {
		t.Errorf("rows below the thresholds shown:\n%s", r.stdout)
	}
	// Another organization has nothing stuck.
	r = x.run(t, "", "stuck", "-org", x.f.NewID(t))
	if strings.Count(r.stdout, ": 0\n") != 7 {
		t.Errorf("stuck for an empty organization:\n%s", r.stdout)
	}
}

func TestShowListsTheAttempts(t *testing.T) {
	t.Parallel()
	x := setup(t)
	other := x.f.NewID(t)
	for _, a := range []struct {
		org, outcome string
		attempt      int
		called       bool
		status       any
		excerpt      string
	}{
		{x.org, "failed", 9, true, 503, "webhook answered 503: busy"},
		{x.org, "dead_letter", 10, true, 422, "webhook answered 422: unknown supplier"},
		// Another organization's history of the same id is never shown.
		{other, "completed", 1, true, 200, "not ours"},
	} {
		if _, err := x.f.Pool.Exec(context.Background(), `
			insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at,
				outcome, provider_called, http_status, error_excerpt)
			values ($1, $2, $3, now() - interval '1 minute', now(), $4, $5, $6, $7)`,
			x.dead, a.org, a.attempt, a.outcome, a.called, a.status, a.excerpt); err != nil {
			t.Fatal(err)
		}
	}
	r := x.run(t, "", "show", x.dead, "-org", x.org)
	if r.code != exitOK {
		t.Fatalf("show: %+v", r)
	}
	for _, want := range []string{"attempts (2)", "503", "webhook answered 503: busy", "422", "webhook answered 422: unknown supplier"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "not ours") {
		t.Errorf("show lists another organization's attempt:\n%s", r.stdout)
	}
	_, section, _ := strings.Cut(r.stdout, "attempts (2)")
	if i, j := strings.Index(section, "503: busy"), strings.Index(section, "422: unknown supplier"); i < 0 || j < 0 || i > j {
		t.Errorf("attempts are not oldest first:\n%s", r.stdout)
	}
}

// check: ok on a freshly installed database; after the host drops a column
// the worker reads, it names the column and the statements it breaks,
// exits 1, and changes nothing.
func TestCheck(t *testing.T) {
	x := setup(t)
	r := x.run(t, "", "check")
	if r.code != exitOK || !strings.Contains(r.stdout, "ok: the host's tables have what the worker needs") {
		t.Fatalf("check on a fresh install: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "connection: direct or session-pooled") {
		t.Errorf("check does not say how it reached the database:\n%s", r.stdout)
	}
	// A build whose routines make migrate has not installed: the statements
	// run plain, and check says to run make migrate.
	var start string
	if err := x.f.Pool.QueryRow(context.Background(), `select p.oid::regprocedure::text from pg_proc p
		where p.proname like 'integration\_outbox\_sql\_outbox\_start\_%'`).Scan(&start); err != nil {
		t.Fatal(err)
	}
	if _, err := x.f.Pool.Exec(context.Background(), "drop function "+start); err != nil {
		t.Fatal(err)
	}
	r = x.run(t, "", "check")
	if r.code != exitError || !strings.Contains(r.stdout, "routine  outbox/start: its routine") ||
		!strings.Contains(r.stdout, "run make migrate") {
		t.Errorf("check with the start's routine missing: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := x.f.Pool.Exec(context.Background(), `alter table external_integration_outbox rename column last_error to error_text`); err != nil {
		t.Fatal(err)
	}
	r = x.run(t, "", "check")
	if r.code != exitError {
		t.Errorf("check with a column gone: code %d, want %d", r.code, exitError)
	}
	for _, want := range []string{"table  external_integration_outbox.last_error: missing",
		"statement  outbox/record: ", `column "last_error"`, "nothing was changed"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("check does not say %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	var n int
	if err := x.f.Pool.QueryRow(context.Background(), `select count(*) from information_schema.columns
		where table_name = 'external_integration_outbox' and column_name = 'error_text'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("check changed the table: %d, %v", n, err)
	}
}

// TestPreviewPrintsTheRequest: outboxctl preview prints the preview the
// inspect function answers: the Xero request with its body as a JSON
// document and the Authorization value redacted; a refusal for a row the
// push would refuse; not found for another organization.
func TestPreviewPrintsTheRequest(t *testing.T) {
	t.Parallel()
	x := setup(t)
	ids := x.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 1,
		Connection: testenv.ConnectionOpts{OrganizationID: x.org, Provider: "xero", CredentialReference: "integrations/xero-1",
			Config: map[string]string{"tenantId": "tenant-7", "accountCode": "300"}},
		Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
	r := x.run(t, "", "preview", ids.CommandID, "-org", x.org)
	if r.code != exitOK {
		t.Fatalf("preview: %+v", r)
	}
	var pv struct {
		Provider, Method, URL string
		Headers               map[string]string
		Body                  map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(r.stdout), &pv); err != nil {
		t.Fatalf("preview output %q: %v", r.stdout, err)
	}
	if pv.Provider != "xero" || !strings.HasPrefix(pv.URL, "https://api.xero.com/api.xro/2.0/PurchaseOrders") ||
		pv.Headers["Authorization"] != "<redacted>" || pv.Body["PurchaseOrders"] == nil {
		t.Errorf("preview %s", r.stdout)
	}

	refused := x.f.Command(t, testenv.CommandOpts{OrganizationID: x.org, ConnectionID: ids.ConnectionID, Provider: "xero",
		EntityID: ids.PurchaseOrderID, Payload: map[string]string{"externalSupplierId": "SUP-1"}})
	r = x.run(t, "", "preview", "-org", x.org, refused)
	if r.code != exitOK || !strings.Contains(r.stdout, `"refusal"`) || !strings.Contains(r.stdout, "payload_invalid") {
		t.Errorf("preview of a refused row: %+v", r)
	}
	if r := x.run(t, "", "preview", ids.CommandID, "-org", x.f.NewID(t)); r.code != exitError || !strings.Contains(r.stderr, "not found") {
		t.Errorf("preview for another organization: %+v", r)
	}
}

// TestCommandsThroughPgBouncer: outboxctl with DATABASE_URL naming PgBouncer
// in transaction mode (its shipped settings, 2 server connections): the
// read views and check work and check says it met a transaction pooler;
// with named statements asked for in the URL, check names that problem.
func TestCommandsThroughPgBouncer(t *testing.T) {
	x := setup(t)
	bouncer, err := testenv.StartPgBouncer(servers.Postgres(t), testenv.PgBouncerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bouncer.Stop)
	cfg, err := pgx.ParseConfig(x.f.URL)
	if err != nil {
		t.Fatal(err)
	}
	x.env["DATABASE_URL"] = bouncer.URLFor(cfg.Database)
	if r := x.run(t, "", "show", x.dead, "-org", x.org); r.code != exitOK || !strings.Contains(r.stdout, "unknown supplier") {
		t.Errorf("show through PgBouncer: %+v", r)
	}
	if r := x.run(t, "", "check"); r.code != exitOK || !strings.Contains(r.stdout, "connection: through a transaction pooler") {
		t.Errorf("check through PgBouncer: %+v", r)
	}
	pooled := x.env["DATABASE_URL"]
	x.env["DATABASE_URL"] = pooled + "&default_query_exec_mode=cache_statement"
	if r := x.run(t, "", "check"); r.code != exitError || !strings.Contains(r.stdout, "remove default_query_exec_mode") {
		t.Errorf("check through PgBouncer with named statements: %+v", r)
	}
	// A search_path in the URL is a startup parameter PgBouncer refuses.
	x.env["DATABASE_URL"] = pooled + "&search_path=public"
	if r := x.run(t, "", "check"); r.code != exitError || !strings.Contains(r.stderr, "alter role") {
		t.Errorf("check through PgBouncer with a search_path in the URL: %+v", r)
	}
}
