package schemacheck_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/hostschema"
	"integration-outbox/internal/migrate"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/schemacheck"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, testenv.WithPostgres(&pg)) }

// Every host shape the contract accepts installs, and then every statement
// the functions run prepares and plans on it; every shape it refuses is
// refused by make migrate before anything changes, naming the table and
// the column.
func TestEveryStatementPreparesOnEveryHostShape(t *testing.T) {
	t.Parallel()
	for _, shape := range testenv.HostShapes() {
		t.Run(shape.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := pg.CreateHostDatabase(t, shape)
			err := migrate.Up(ctx, url)
			conn, cerr := pgx.Connect(ctx, url)
			if cerr != nil {
				t.Fatal(cerr)
			}
			defer conn.Close(ctx)
			if len(shape.Refused) > 0 {
				if err == nil {
					t.Fatal("make migrate accepted a shape the contract refuses")
				}
				for _, want := range shape.Refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the refusal %q does not say %q", err, want)
					}
				}
				var changed bool
				if err := conn.QueryRow(ctx, `select to_regclass('integration_outbox_owned_objects') is not null
					or exists (select 1 from pg_attribute where attrelid = 'external_integration_outbox'::regclass and attname = 'claim_token')`).Scan(&changed); err != nil {
					t.Fatal(err)
				}
				if changed {
					t.Error("the refused install changed the database")
				}
				return
			}
			if err != nil {
				t.Fatalf("make migrate: %v", err)
			}
			r, err := schemacheck.Run(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			if r.Checked < len(schemacheck.Statements()) {
				t.Errorf("checked %d statements, want all %d", r.Checked, len(schemacheck.Statements()))
			}
			if err := r.Err(); err != nil {
				t.Error(err)
			}
		})
	}
}

// Every conflict type a statement writes, and every one the push records
// (outbox.Conflict*), is declared (hostschema.ConflictTypes): the install
// refuses a conflict_type column too short for the longest, so one left
// out could be cut or refused on a host's varchar.
func TestEveryConflictTypeWrittenIsDeclared(t *testing.T) {
	t.Parallel()
	written := map[string]bool{}
	for _, c := range []outbox.ConflictType{outbox.ConflictProviderRejected, outbox.ConflictCredentialRejected,
		outbox.ConflictConfigurationInvalid, outbox.ConflictEntityNotFound, outbox.ConflictPayloadInvalid} {
		written[string(c)] = true
	}
	// The literals the statements insert into conflict_type: every quoted
	// name in a statement that inserts conflicts, that reads like one.
	literal := regexp.MustCompile(`'((?:connection|provider|credential|configuration|entity|payload)_[a-z_]+)'`)
	for _, s := range schemacheck.Statements() {
		if !strings.Contains(s.SQL, "insert into external_integration_conflicts") {
			continue
		}
		for _, m := range literal.FindAllStringSubmatch(s.SQL, -1) {
			if !isColumn(m[1]) { // integration_outbox_fit names its column
				written[m[1]] = true
			}
		}
	}
	if len(written) < 8 {
		t.Fatalf("found only %d conflict types: is the pattern reading the statements? %v", len(written), written)
	}
	for c := range written {
		if !slices.Contains(hostschema.ConflictTypes, c) {
			t.Errorf("conflict type %q is written but not in hostschema.ConflictTypes", c)
		}
	}
}

func isColumn(name string) bool {
	for _, t := range hostschema.Tables {
		if _, ok := t.Column(name); ok {
			return true
		}
	}
	return false
}
