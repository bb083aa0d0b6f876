package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HostShape is a host database as an ORM or the old worker's own
// migrations left it: the host's tables created before make migrate runs,
// with only what the contract promises (docs/deploy.md, "What the worker
// needs of the host's tables") and the types that may vary.
type HostShape struct {
	Name string
	// SQL creates the host's tables (those it leaves out get the stand-in).
	SQL string
	// TimeZone, when set, is the database's TimeZone.
	TimeZone string
	// Refused, when set, is what make migrate's refusal must say: the
	// shape is one the contract does not accept.
	Refused []string
}

// hostTypes are the types of the contract's columns of the host's tables,
// as an ORM's defaults give them; each shape sets what it varies (empty:
// the stand-in's type).
type hostTypes struct {
	text, status, conflictStatus, json, ts string
	extraConflicts, before                 string
	conflictID, outboxID                   string
}

func (h hostTypes) sql() string {
	or := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	text, ts, js := or(h.text, "text"), or(h.ts, "timestamptz"), or(h.json, "jsonb")
	status := or(h.status, "text")
	cstatus := or(h.conflictStatus, "text")
	outboxID := or(h.outboxID, "uuid primary key default gen_random_uuid()")
	conflictID := or(h.conflictID, "uuid primary key default gen_random_uuid()")
	r := strings.NewReplacer("TEXT", text, "TS", ts, "JSON", js, "STATUSTYPE", status, "CSTATUS", cstatus,
		"OUTBOXID", outboxID, "CONFLICTID", conflictID, "EXTRACONFLICTS", h.extraConflicts)
	return h.before + r.Replace(`
create table integration_connections (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    location_id uuid,
    provider TEXT not null,
    credential_reference TEXT,
    config_json JSON not null default '{}',
    created_at TS not null default now()
);
create table purchase_orders (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    location_id uuid,
    order_number TEXT,
    currency_code TEXT,
    status TEXT,
    created_at TS not null default now()
);
create table purchase_order_lines (
    id uuid primary key default gen_random_uuid(),
    purchase_order_id uuid not null,
    stock_item_id uuid,
    ordered_quantity numeric,
    purchase_unit_code TEXT,
    normalized_unit_code TEXT,
    units_per_purchase_unit_snapshot numeric,
    unit_price_minor_snapshot integer,
    created_at TS not null default now()
);
create table external_integration_outbox (
    id OUTBOXID,
    organization_id uuid not null,
    integration_connection_id uuid,
    provider TEXT,
    command_type TEXT,
    local_entity_type TEXT,
    local_entity_id uuid,
    payload_json JSON not null default '{}',
    idempotency_key TEXT,
    status STATUSTYPE not null default 'queued',
    attempt_count integer not null default 0,
    next_attempt_at TS,
    last_error TEXT,
    provider_reference TEXT,
    provider_status TEXT,
    completed_at TS,
    created_at TS not null default now()
);
create table external_integration_conflicts (
    id CONFLICTID,
    organization_id uuid not null,
    location_id uuid,
    integration_connection_id uuid,
    conflict_type TEXT not null,
    severity TEXT not null default 'high',
    local_entity_type TEXT,
    local_entity_id uuid,
    summary TEXT,
    local_snapshot JSON,
    status CSTATUS not null default 'open',
    created_at TS not null default now()EXTRACONFLICTS
);`)
}

const typeormEnums = `
create type external_integration_outbox_status_enum as enum ('queued', 'processing', 'completed', 'failed', 'dead_letter');
create type external_integration_conflicts_status_enum as enum ('open', 'resolved');
`

// HostShapes are the shapes the tests install onto and run the pipeline
// on: those the contract accepts, then those make migrate must refuse.
func HostShapes() []HostShape {
	return []HostShape{
		{Name: "old worker's columns", SQL: hostTypes{}.sql()},
		{Name: "TypeORM enum statuses", SQL: hostTypes{before: typeormEnums,
			status: "external_integration_outbox_status_enum", conflictStatus: "external_integration_conflicts_status_enum"}.sql()},
		{Name: "TypeORM varchar(255)", SQL: hostTypes{text: "character varying(255)"}.sql()},
		{Name: "json not jsonb", SQL: hostTypes{json: "json"}.sql()},
		{Name: "timestamps without time zone, TimeZone not UTC", SQL: hostTypes{ts: "timestamp without time zone"}.sql(),
			TimeZone: "America/Los_Angeles"},
		{Name: "TypeORM all at once", SQL: hostTypes{before: typeormEnums, text: "character varying(255)", json: "json",
			ts: "timestamp without time zone", status: "external_integration_outbox_status_enum",
			conflictStatus: "external_integration_conflicts_status_enum"}.sql(), TimeZone: "Asia/Kolkata"},
		{Name: "stand-in"},

		{Name: "conflicts id serial", SQL: hostTypes{conflictID: "serial primary key"}.sql(),
			Refused: []string{"external_integration_conflicts.id: is integer", "uuid"}},
		{Name: "outbox id bigint identity", SQL: hostTypes{outboxID: "bigint generated by default as identity primary key"}.sql(),
			Refused: []string{"external_integration_outbox.id: is bigint", "uuid"}},
		{Name: "conflicts NOT NULL column without default", SQL: hostTypes{extraConflicts: ",\n    resolved_by text not null"}.sql(),
			Refused: []string{"external_integration_conflicts.resolved_by: is NOT NULL without a default"}},
	}
}

// CreateHostDatabase returns the URL of a new, empty database holding the
// shape's host tables (nothing of ours: make migrate has not run).
func (p *Postgres) CreateHostDatabase(t testing.TB, shape HostShape) string {
	t.Helper()
	ctx := context.Background()
	url, err := p.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if shape.TimeZone != "" {
		if _, err := conn.Exec(ctx, fmt.Sprintf("alter database %s set timezone = '%s'",
			pgx.Identifier{conn.Config().Database}.Sanitize(), shape.TimeZone)); err != nil {
			t.Fatal(err)
		}
	}
	if shape.SQL != "" {
		if _, err := conn.Exec(ctx, shape.SQL); err != nil {
			t.Fatalf("creating the host shape %q: %v", shape.Name, err)
		}
	}
	return url
}
