package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestQueryArgs(t *testing.T) {
	loc := "7d1f4f0e-0000-4000-8000-000000000004"
	cases := []struct {
		name string
		args poLoadArgs
		want pgx.NamedArgs
	}{
		{"no location", poLoadArgs{OutboxID: "o", OrganizationID: "org", OrderID: "po", ConnectionID: "c", Provider: "sandbox"},
			pgx.NamedArgs{"outbox_ids": []string{"o"}, "organization_ids": []string{"org"}, "order_ids": []string{"po"},
				"location_ids": []*string{nil}, "connection_ids": []string{"c"}, "providers": []string{"sandbox"}}},
		{"location", poLoadArgs{OutboxID: "o", OrganizationID: "org", OrderID: "po", LocationID: &loc, ConnectionID: "c", Provider: "xero"},
			pgx.NamedArgs{"outbox_ids": []string{"o"}, "organization_ids": []string{"org"}, "order_ids": []string{"po"},
				"location_ids": []*string{&loc}, "connection_ids": []string{"c"}, "providers": []string{"xero"}}},
	}
	for _, c := range cases {
		if got := c.args.queryArgs(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: queryArgs() = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestConfigLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stmt := write("load.sql", "\nselect 1\n")
	jobs := write("jobs.jsonl", `{"outboxId":"o1","organizationId":"g","orderId":"p1","connectionId":"c","provider":"sandbox"}`+"\n"+
		`{"outboxId":"o2","organizationId":"g","orderId":"p2","locationId":"l","connectionId":"c","provider":"sandbox"}`+"\n")

	c := config{worker: workerPOLoad, jobs: 2}
	if err := c.load(stmt, jobs); err != nil {
		t.Fatal(err)
	}
	if c.loadSQL != "select 1" || len(c.poJobs) != 2 || c.poJobs[1].OrderID != "p2" || *c.poJobs[1].LocationID != "l" || c.poJobs[0].LocationID != nil {
		t.Errorf("loaded %q and %+v", c.loadSQL, c.poJobs)
	}
	if _, ok := c.args(1).(poLoadArgs); !ok {
		t.Errorf("args(1) is %T, want poLoadArgs", c.args(1))
	}

	for name, c := range map[string]struct {
		cfg        config
		stmt, jobs string
	}{
		"unknown worker":  {config{worker: "sleep", jobs: 2}, stmt, jobs},
		"no statement":    {config{worker: workerPOLoad, jobs: 2}, "", jobs},
		"empty statement": {config{worker: workerPOLoad, jobs: 2}, write("empty.sql", "\n"), jobs},
		"jobs not -jobs":  {config{worker: workerPOLoad, jobs: 3}, stmt, jobs},
	} {
		if err := c.cfg.load(c.stmt, c.jobs); err == nil {
			t.Errorf("%s: load succeeded", name)
		}
	}
	noop := config{worker: workerNoop, jobs: 2}
	if err := noop.load("", ""); err != nil {
		t.Errorf("noop: %v", err)
	}
	if _, ok := noop.args(1).(noopArgs); !ok {
		t.Errorf("noop args(1) is %T, want noopArgs", noop.args(1))
	}
}
