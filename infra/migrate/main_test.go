package main

import (
	"context"
	"strings"
	"testing"

	"integration-outbox/internal/testenv"
)

var servers testenv.OnDemand

func TestMain(m *testing.M) { testenv.Main(m, testenv.WithOnDemand(&servers)) }

// make migrate's schema check passes on a fresh install, and names the
// statement and PostgreSQL's error once the host's table no longer fits.
func TestMigrateChecksEveryStatementAfterInstalling(t *testing.T) {
	f := servers.Postgres(t).NewDB(t)
	n, err := check(context.Background(), f.URL)
	if err != nil || n < 50 {
		t.Fatalf("check on a fresh install: %d statements, %v", n, err)
	}
	if _, err := f.Pool.Exec(context.Background(), `alter table external_integration_conflicts rename column summary to summary_text`); err != nil {
		t.Fatal(err)
	}
	_, err = check(context.Background(), f.URL)
	if err == nil {
		t.Fatal("the check passed with the conflicts' summary gone")
	}
	for _, want := range []string{"external_integration_conflicts.summary: missing", "statement outbox/record: ", `column "summary"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
