package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/strictjson"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

// The views run in a transaction PostgreSQL keeps read-only: a write there
// fails, whatever the database user may do.
func TestViewsRunInAReadOnlyTransaction(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	i := New(f.Pool, Config{})
	err := i.readOnly(context.Background(), func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `insert into external_integration_rerun_audit (organization_id, reason, payload)
			values (gen_random_uuid(), 'x', '{}')`)
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("a write in the inspection transaction: %v, want read_only_sql_transaction (25006)", err)
	}
}

func TestRowOfAnotherOrganizationIsNotFoundNotAnError(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	id := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})})
	i := New(f.Pool, Config{Logger: slog.New(slog.DiscardHandler)})
	mine, err := i.Handle(context.Background(), json.RawMessage(`{"organizationId":"`+org+`","outboxId":"`+strings.ToUpper(id)+`"}`))
	if err != nil || !mine.Found || mine.Attempts == nil || mine.Conflicts == nil || mine.Reruns == nil {
		t.Fatalf("own row: %+v, %v", mine, err)
	}
	other, err := i.Handle(context.Background(), json.RawMessage(`{"organizationId":"`+f.NewID(t)+`","outboxId":"`+id+`"}`))
	if err != nil || other.Found || other.Row != nil || !strings.Contains(other.Message, "not found") {
		t.Errorf("another organization: %+v, %v", other, err)
	}
}

func TestParseNamesTheBadField(t *testing.T) {
	t.Parallel()
	const org, id = "11111111-1111-4111-8111-111111111111", "99999999-9999-4999-8999-999999999901"
	for payload, field := range map[string]string{
		`[]`:                        "payload",
		`{"outboxId":"` + id + `"}`: "organizationId",
		`{"organizationId":"acme","outboxId":"` + id + `"}`:                     "organizationId",
		`{"organizationId":"` + org + `"}`:                                      "outboxId",
		`{"organizationId":"` + org + `","outboxId":"42"}`:                      "outboxId",
		`{"organizationId":"` + org + `","OutboxId":"` + id + `"}`:              "OutboxId",
		`{"organizationId":"` + org + `","stuck":false}`:                        "stuck",
		`{"organizationId":"` + org + `","stuck":"yes"}`:                        "stuck",
		`{"organizationId":"` + org + `","stuck":true,"outboxId":"` + id + `"}`: "stuck",
		`{"organizationId":"` + org + `","stuck":true,"limit":0}`:               "limit",
		`{"organizationId":"` + org + `","outboxId":"` + id + `","limit":5}`:    "limit",
	} {
		_, err := Parse([]byte(payload))
		var fe *strictjson.FieldError
		if !errors.As(err, &fe) || !strings.Contains(fe.Field, field) {
			t.Errorf("%s: error %v, want one naming %s", payload, err, field)
		}
	}
	for payload, want := range map[string]Request{
		`{"organizationId":"` + strings.ToUpper(org) + `","outboxId":"` + id + `"}`: {OrganizationID: org, OutboxID: id},
		`{"organizationId":"` + org + `","stuck":true,"limit":10}`:                  {OrganizationID: org, Stuck: true, Limit: 10},
	} {
		got, err := Parse([]byte(payload))
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", payload, got, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"organizationId":"11111111-1111-4111-8111-111111111111","stuck":true}`))
	f.Add([]byte(`{"organizationId":"11111111-1111-4111-8111-111111111111","outboxId":"99999999-9999-4999-8999-999999999901"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := Parse(raw)
		if err != nil {
			return
		}
		if req.OrganizationID == "" || (req.OutboxID == "") == !req.Stuck {
			t.Errorf("accepted %q as %+v", raw, req)
		}
	})
}
