package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/testenv"
)

// The enqueue's row of measurement 9 sets its CPU beside the plain insert's
// the keyed insert's and the enqueue's without its probe, and judges the target on the enqueue alone.
func TestWALRowsSetTheEnqueueBesideThePlainAndTheKeyedInsert(t *testing.T) {
	batch := walBatch{Inserts: 100, WAL: 100 * 1000, Took: time.Second}
	runs := []walRun{
		{Schema: "host only", Rows: 1000, Host: batch},
		{Schema: everyMigration, Version: 26, Rows: 1000, Host: batch, Enqueue: walBatch{Inserts: 100, WAL: 100 * 1100, Took: time.Second},
			CPU: walCPU{Calls: 1000, Host: 200 * time.Millisecond, Keyed: 220 * time.Millisecond, Unprobed: 240 * time.Millisecond, Enqueue: 260 * time.Millisecond}},
	}
	var cpuRow *tableRow
	rows := walRows(runs)
	for i := range rows {
		if strings.Contains(rows[i].measure, "server CPU per call") {
			cpuRow = &rows[i]
		}
	}
	if cpuRow == nil {
		t.Fatalf("no CPU row among %+v", rows)
	}
	for _, want := range []string{"0.260 ms", "0.200 ms", "0.220 ms", "0.240 ms"} {
		if !strings.Contains(cpuRow.ours+cpuRow.beside, want) {
			t.Errorf("the row lacks %s: %+v", want, *cpuRow)
		}
	}
	if want := "CPU 1.30× (the keyed insert 1.10×, the enqueue without the probe 1.20×); WAL 1.10×"; cpuRow.ratio != want {
		t.Errorf("ratio %q, want %q", cpuRow.ratio, want)
	}
	if cpuRow.status != status(false) {
		t.Errorf("status %q: 1.30× is above the target", cpuRow.status)
	}
}

// The keyed insert's id is the one integration_outbox_key_id gives, so that
// it conflicts where the enqueue's row would.
func TestKeyIDIsTheEnqueuesID(t *testing.T) {
	ctx := context.Background()
	// make migrate creates the stand-in host tables where none are.
	url := servers.Postgres(t).CreateHostDatabase(t, testenv.HostShape{Name: "stand-in"})
	if err := migrate.UpWith(ctx, url, migrate.Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, key := range []string{"po-1", "purchase-order-approved:0f1c", "ключ ✓"} {
		org := "00000000-0000-4000-8000-000000000042"
		got, err := keyID(org, key)
		if err != nil {
			t.Fatal(err)
		}
		var want string
		if err := conn.QueryRow(ctx, `select integration_outbox_key_id($1, $2)::text`, org, key).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("keyID(%q) = %s, integration_outbox_key_id gives %s", key, got, want)
		}
	}
	// The enqueue without the probe works on the same tables and gives the
	// row the key's id.
	if err := createUnprobedEnqueue(ctx, conn); err != nil {
		t.Fatal(err)
	}
	org, connID := "00000000-0000-4000-8000-000000000007", "00000000-0000-4000-9000-000000000007"
	if _, err := conn.Exec(ctx, `insert into integration_connections (id, organization_id, provider) values ($1, $2, 'webhook')`, connID, org); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := conn.QueryRow(ctx, unprobedEnqueueSQL+"::text", org, connID, "k-1", `{"externalSupplierId": "SUP-1"}`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want, _ := keyID(org, "k-1"); got != want {
		t.Errorf("the enqueue without the probe returned %s, the key's id is %s", got, want)
	}
	if _, err := keyID("not-a-uuid", "k"); err == nil {
		t.Error("keyID took an organization that is not a UUID")
	}
}
