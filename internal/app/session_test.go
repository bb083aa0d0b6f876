package app_test

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/app"
)

// TestOurConnectionsRunWithoutJIT: the functions' pool asks for jit off in
// each connection's startup message, so no statement of ours pays for JIT
// compilation; a connection of the host's (no such parameter) keeps the
// database's setting.
func TestOurConnectionsRunWithoutJIT(t *testing.T) {
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
	env := map[string]string{"DATABASE_URL": f.URL, "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
	a, err := app.New(ctx, func(k string) string { return env[k] }, io.Discard, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	var ours, host string
	if err := a.Pool.QueryRow(ctx, "show jit").Scan(&ours); err != nil {
		t.Fatal(err)
	}
	hostConn, err := pgx.Connect(ctx, f.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer hostConn.Close(ctx)
	if err := hostConn.QueryRow(ctx, "show jit").Scan(&host); err != nil {
		t.Fatal(err)
	}
	if ours != "off" {
		t.Errorf("jit on the functions' connections: %q, want off", ours)
	}
	if host != "on" {
		t.Errorf("jit on a host connection to the same database: %q, want the database's on", host)
	}
}
