package retention_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/metrics"
	"integration-outbox/internal/retention"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

type bundle struct {
	f    *testenv.Fixture
	org  string
	conn string
}

func setup(t *testing.T) bundle {
	t.Helper()
	f := pg.NewDB(t)
	org := f.NewID(t)
	return bundle{f: f, org: org, conn: f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})}
}

func (b bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.f.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// row inserts a row in status, completed (or last updated) age ago, with
// one attempt, one conflict and a rerun audit naming it.
func (b bundle) row(t *testing.T, status string, age time.Duration) string {
	t.Helper()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, Status: status, AttemptCount: 1})
	at := time.Now().Add(-age)
	if status == "completed" || status == "unsupported" {
		b.exec(t, `update external_integration_outbox set completed_at = $2 where id = $1`, id, at)
	}
	b.exec(t, `update external_integration_outbox set created_at = $2, updated_at = $2 where id = $1`, id, at)
	b.exec(t, `insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at, outcome)
		values ($1, $2, 1, $3, $3, $4)`, id, b.org, at, status)
	b.exec(t, `insert into external_integration_conflicts (organization_id, conflict_type, summary, status, outbox_id)
		values ($1, 'provider_rejected', 'kept', 'resolved', $2)`, b.org, id)
	b.exec(t, `insert into external_integration_rerun_audit (organization_id, reason, payload, affected_ids)
		values ($1, 'kept', '{}', array[$2::uuid])`, b.org, id)
	return id
}

func (b bundle) exists(t *testing.T, id string) bool {
	return b.f.Count(t, `select count(*) from external_integration_outbox where id = $1`, id) == 1
}

func TestOnlyOldCompletedAndUnsupportedRowsGoWithTheirAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const day = 24 * time.Hour
	oldCompleted, oldUnsupported := b.row(t, "completed", 40*day), b.row(t, "unsupported", 31*day)
	young := b.row(t, "completed", 29*day)
	var kept []string
	for _, s := range []string{"queued", "processing", "failed", "uncertain", "dead_letter"} {
		kept = append(kept, b.row(t, s, 400*day))
	}
	var out bytes.Buffer
	s, err := retention.New(b.f.Pool, retention.Config{Age: 30 * day, Metrics: metrics.NewEmitter(&out, "retention")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Enabled || res.Deleted != 2 || res.More {
		t.Errorf("result %+v, want 2 deleted", res)
	}
	for _, id := range []string{oldCompleted, oldUnsupported} {
		if b.exists(t, id) {
			t.Errorf("row %s older than the age is still there", id)
		}
		if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1`, id); n != 0 {
			t.Errorf("row %s deleted but %d attempts left", id, n)
		}
	}
	for _, id := range append(kept, young) {
		if !b.exists(t, id) || b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = $1`, id) != 1 {
			t.Errorf("row %s (or its attempt) was deleted", id)
		}
	}
	if n := b.f.Count(t, `select count(*) from external_integration_conflicts`); n != 8 {
		t.Errorf("%d conflicts left, want all 8 kept", n)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_rerun_audit`); n != 8 {
		t.Errorf("%d rerun audits left, want all 8 kept", n)
	}
	if !strings.Contains(out.String(), `"RetentionDeleted":2`) {
		t.Errorf("metric line lacks RetentionDeleted 2: %s", out.String())
	}
}

func TestBatchesAreBoundedAndARunStopsAtItsLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 7 {
		b.row(t, "completed", 48*time.Hour)
	}
	s, err := retention.New(b.f.Pool, retention.Config{Age: 24 * time.Hour, BatchSize: 2, MaxBatches: 3})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 6 || res.Batches != 3 || !res.More {
		t.Errorf("first run %+v, want 6 deleted in 3 batches of 2, more left", res)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox`); n != 1 {
		t.Errorf("%d rows left after the first run, want 1", n)
	}
	if res, err = s.Run(context.Background()); err != nil || res.Deleted != 1 || res.Batches != 1 || res.More {
		t.Errorf("second run %+v, %v; want the last row in one short batch", res, err)
	}
}

func TestOffByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.row(t, "completed", 10*365*24*time.Hour)
	s, err := retention.New(b.f.Pool, retention.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Handle(context.Background(), []byte(`{}`))
	if err != nil || res.Enabled || res.Deleted != 0 || !b.exists(t, id) {
		t.Errorf("retention without an age: %+v, %v (row kept: %v)", res, err, b.exists(t, id))
	}
}

// A row another transaction holds is skipped, not waited for.
func TestLockedRowsAreSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held, free := b.row(t, "completed", 48*time.Hour), b.row(t, "completed", 48*time.Hour)
	ctx := context.Background()
	tx, err := b.f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `select 1 from external_integration_outbox where id = $1 for update`, held); err != nil {
		t.Fatal(err)
	}
	s, err := retention.New(b.f.Pool, retention.Config{Age: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(ctx)
	if err != nil || res.Deleted != 1 || b.exists(t, free) || !b.exists(t, held) {
		t.Errorf("with one row locked: %+v, %v", res, err)
	}
}

func TestBadAgeAndPayloadAreRefused(t *testing.T) {
	t.Parallel()
	if _, err := retention.New(nil, retention.Config{Age: time.Minute}); err == nil {
		t.Error("an age below the minimum was accepted")
	}
	s, err := retention.New(nil, retention.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Handle(context.Background(), []byte(`{"age": "1h"}`)); err == nil || !strings.Contains(err.Error(), "age") {
		t.Errorf("unknown key: %v, want an error naming it", err)
	}
}

// A run whose invocation has too little time left for a batch stops
// between batches instead of being cut off inside one.
func TestRunStopsBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.row(t, "completed", 48*time.Hour)
	s, err := retention.New(b.f.Pool, retention.Config{Age: 24 * time.Hour, StatementTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Run(ctx)
	if err != nil || res.Batches != 0 || res.Deleted != 0 || !b.exists(t, id) {
		t.Errorf("with less time left than a batch may take: %+v, %v", res, err)
	}
}
