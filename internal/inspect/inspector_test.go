package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/migrate"
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
		`{"organizationId":"` + org + `","stuck":true,"preview":true}`:          "preview",
		`{"organizationId":"` + org + `","outboxId":"` + id + `","preview":1}`:  "preview",
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

// The stuck view lists what the old worker left in processing, before and
// after make migrate gave it a lease or a follow-up time: its kind, what the
// dispatch will do, and when.
func TestStuckViewListsTheOldWorkersLeftovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	var leased, accepted string
	if err := f.Pool.QueryRow(ctx, `
		with ins as (
			insert into external_integration_outbox (organization_id, integration_connection_id, command_type, status,
				attempt_count, provider_status)
			values ($1, $2, 'push_purchase_order', 'processing', 1, null),
			       ($1, $2, 'push_purchase_order', 'processing', 1, 'accepted')
			returning id, provider_status)
		select (select id::text from ins where provider_status is null),
		       (select id::text from ins where provider_status is not null)`, org, conn).Scan(&leased, &accepted); err != nil {
		t.Fatal(err)
	}
	i := New(f.Pool, Config{Logger: slog.New(slog.DiscardHandler)})
	stuck := func() map[string]Leftover {
		t.Helper()
		resp, err := i.Handle(ctx, json.RawMessage(`{"organizationId":"`+org+`","stuck":true}`))
		if err != nil || resp.Stuck == nil {
			t.Fatalf("stuck view: %+v, %v", resp, err)
		}
		out := map[string]Leftover{}
		for _, l := range resp.Stuck.OldWorker.Rows {
			out[l.ID] = l
		}
		if resp.Stuck.OldWorker.Total != len(out) {
			t.Errorf("oldWorker total %d, rows %d", resp.Stuck.OldWorker.Total, len(out))
		}
		return out
	}
	before := stuck()
	if l := before[leased]; l.Kind != "lease" || l.NextAt != nil || !strings.Contains(l.Next, "make migrate") {
		t.Errorf("before the install, the unleased row: %+v", l)
	}
	if l := before[accepted]; l.Kind != "follow_up" || l.NextAt != nil || !strings.Contains(l.Next, "make migrate") {
		t.Errorf("before the install, the accepted row: %+v", l)
	}

	if err := migrate.Up(ctx, f.URL); err != nil {
		t.Fatal(err)
	}
	after := stuck()
	var dbNow time.Time
	if err := f.Pool.QueryRow(ctx, `select now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	in40 := func(at *time.Time) bool {
		return at != nil && at.After(dbNow.Add(39*time.Minute)) && !at.After(dbNow.Add(40*time.Minute))
	}
	if l := after[leased]; l.Kind != "lease" || !in40(l.NextAt) || !in40(l.LeaseExpiresAt) ||
		l.Next != "claimed again by the dispatch when its lease ends" {
		t.Errorf("after the install, the leased row: %+v", l)
	}
	if l := after[accepted]; l.Kind != "follow_up" || !in40(l.NextAt) || !in40(l.NextAttemptAt) ||
		l.Next != "followed up by the dispatch at its follow-up time" {
		t.Errorf("after the install, the accepted row: %+v", l)
	}
}
