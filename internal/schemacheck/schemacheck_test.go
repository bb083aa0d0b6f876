package schemacheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
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
