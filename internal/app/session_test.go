package app_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/app"
	"integration-outbox/internal/outbox"
)

// TestOurConnectionsLeaveNothingOnTheirSession: the functions' pool is
// safe behind a transaction pooler with no setting. Its connections send no
// startup parameter (PgBouncer refuses one it does not know, such as the
// jit=off they used to send) and unnamed statements (pgx's
// QueryExecModeCacheDescribe): after a claim, a start and a record through
// the pool, its connection holds no prepared statement and no session
// setting of ours, while the routines switch jit off for their own run
// (their SET clause) on a database where it is on.
// default_query_exec_mode in DATABASE_URL still chooses named statements for
// a direct connection.
func TestOurConnectionsLeaveNothingOnTheirSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	var dbName string
	if err := f.Pool.QueryRow(ctx, "select current_database()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pool.Exec(ctx, "alter database "+pgx.Identifier{dbName}.Sanitize()+" set jit = on"); err != nil {
		t.Fatal(err)
	}
	newApp := func(url string) *app.App {
		env := map[string]string{"DATABASE_URL": url, "AWS_REGION": "us-east-1",
			"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "DATABASE_POOL_SIZE": "1"}
		a, err := app.New(ctx, func(k string) string { return env[k] }, io.Discard, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		return a
	}
	a := newApp(f.URL)
	cfg := a.Pool.Config().ConnConfig
	if len(cfg.RuntimeParams) != 0 {
		t.Errorf("startup parameters of the functions' connections: %v, want none", cfg.RuntimeParams)
	}
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheDescribe {
		t.Errorf("query exec mode %v, want cache_describe (unnamed statements)", cfg.DefaultQueryExecMode)
	}
	if _, err := f.Pool.Exec(ctx, `insert into integration_connections (id, organization_id, provider, config_json)
		values ('00000000-0000-4000-9000-000000000001', '00000000-0000-4000-8000-000000000001', 'sandbox', '{}');
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count)
		values ('00000000-0000-4000-8000-000000000001', '00000000-0000-4000-9000-000000000001', 'sandbox',
		    'push_purchase_order', 'purchase_order', gen_random_uuid(), '{}', 'k-1', 'queued', 0)`); err != nil {
		t.Fatal(err)
	}
	store := outbox.NewStore(a.Pool)
	claims, err := store.Claim(ctx, outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute, MaxInFlight: 100, ConnectionMaxInFlight: 10})
	if err != nil || len(claims) != 1 {
		t.Fatalf("Claim = %d claims, %v; want 1", len(claims), err)
	}
	var prepared int
	var jit, jitInRoutine string
	if err := a.Pool.QueryRow(ctx, `select (select count(*) from pg_prepared_statements), current_setting('jit'),
		(select coalesce(array_to_string(proconfig, ','), '') from pg_proc where proname like 'integration\_outbox\_sql\_outbox\_claim\_scheduled\_%')`).
		Scan(&prepared, &jit, &jitInRoutine); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 {
		t.Errorf("prepared statements on the functions' connection after a claim: %d, want 0", prepared)
	}
	if jit != "on" {
		t.Errorf("jit on the functions' connection: %q, want the database's on (nothing of ours set on the session)", jit)
	}
	if !strings.HasSuffix(jitInRoutine, ",plan_cache_mode=force_generic_plan,enable_bitmapscan=off,jit=off") {
		t.Errorf("the claim routine's settings: %q, want the claim set-up's", jitInRoutine)
	}

	named := newApp(f.URL + "&default_query_exec_mode=cache_statement")
	if got := named.Pool.Config().ConnConfig.DefaultQueryExecMode; got != pgx.QueryExecModeCacheStatement {
		t.Errorf("query exec mode with default_query_exec_mode=cache_statement in the URL: %v, want it kept", got)
	}
}
