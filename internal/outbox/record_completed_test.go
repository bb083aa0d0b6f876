package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// startedGroup is a connection's commands, claimed and started, and one
// row parked behind the first of them (waiting_for_outbox_id).
type startedGroup struct {
	conn   string
	jobs   []outbox.Job
	waiter string
}

// startGroup makes a connection of org with n commands, claims and starts
// them, and parks a queued row behind the first.
func startGroup(t *testing.T, b bundle, s *outbox.Store, n int) startedGroup {
	t.Helper()
	ctx := context.Background()
	g := startedGroup{conn: b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Config: map[string]any{"ordered": false}})}
	want := map[string]bool{}
	for range n {
		want[b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: g.conn, EntityID: b.po})] = true
	}
	claims, err := s.Claim(ctx, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil || len(claims) != n {
		t.Fatalf("claimed %d of %d: %v", len(claims), n, err)
	}
	var reqs []outbox.StartRequest
	for _, c := range claims {
		if !want[c.ID] {
			t.Fatalf("claimed %s, another connection's row", c.ID)
		}
		reqs = append(reqs, outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID,
			ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken})
	}
	if g.jobs, err = s.Start(ctx, reqs); err != nil || len(g.jobs) != n {
		t.Fatalf("started %d of %d: %v", len(g.jobs), n, err)
	}
	g.waiter = b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: g.conn, EntityID: b.po})
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox
		set waiting_for_outbox_id = $2, next_attempt_at = now() + interval '1 hour' where id = $1`, g.waiter, g.jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	return g
}

// successes are the outcomes of g's jobs as a push records a batch that
// completed: the first without a provider call (no circuit), the others
// called with their answer.
func (g startedGroup) successes() []outbox.Outcome {
	called := time.Date(2026, 12, 6, 10, 0, 0, 123456000, time.UTC)
	var outs []outbox.Outcome
	for i, j := range g.jobs {
		o := outbox.Outcome{OutboxID: j.ID, OrganizationID: j.OrganizationID, ConnectionID: j.ConnectionID,
			ClaimToken: j.ClaimToken, Status: outbox.StatusCompleted, ProviderReference: fmt.Sprintf("ref-%d", i)}
		if i > 0 {
			o.ProviderStatus, o.ProviderCalled, o.HTTPStatus, o.Circuit = "AUTHORISED", true, 201, outbox.CircuitSuccess
			o.CallStartedAt, o.CallFinishedAt = called, called.Add(time.Duration(i)*time.Millisecond)
		}
		outs = append(outs, o)
	}
	return outs
}

// written is what a record left of g, one line per job in order: its
// outbox row, its attempt history and its start, then its waiting row.
func (g startedGroup) written(t *testing.T, f *testenv.Fixture) string {
	t.Helper()
	var lines []string
	for _, j := range g.jobs {
		var line string
		if err := f.Pool.QueryRow(context.Background(), `
			select concat_ws(' | ', o.status, o.attempt_count, o.provider_reference, coalesce(o.provider_status, '-'),
				coalesce(o.last_error, '-'), o.next_attempt_at is null, o.waiting_for_outbox_id is null,
				o.completed_at is not null, o.lease_expires_at is null, o.started_at is not null,
				(select count(*) from integration_outbox_starts st where st.outbox_id = o.id),
				(select string_agg(concat_ws(' ', a.attempt, a.outcome, a.started_at = o.started_at,
					case when a.provider_called then (a.finished_at - a.started_at)::text else (a.finished_at >= a.started_at)::text end,
					a.provider_called, a.http_status, coalesce(a.error_excerpt, '-'), a.provider_reference,
					coalesce(a.provider_status, '-'), coalesce(a.outcome_unknown::text, '-')), '; ')
				 from external_integration_attempts a where a.outbox_id = o.id))
			from external_integration_outbox o where o.id = $1`, j.ID).Scan(&line); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	var waiter string
	if err := f.Pool.QueryRow(context.Background(), `select concat_ws(' | ', status, waiting_for_outbox_id is null,
		next_attempt_at <= now()) from external_integration_outbox where id = $1`, g.waiter).Scan(&waiter); err != nil {
		t.Fatal(err)
	}
	return strings.Join(append(lines, "waiter: "+waiter), "\n")
}

// A batch of successes is recorded by record_completed.sql, which writes
// what record.sql writes for it: the rows completed with their answers,
// one attempt each, the starts gone, the row parked behind one woken. A
// repeat of the record (its acknowledgement lost) records nothing on
// either.
func TestRecordCompletedWritesWhatRecordWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.store.WithCircuit(outbox.Circuit{FailureThreshold: 3, Cooldown: time.Minute})
	viaRecord, viaCompleted, viaRecordSQL := startGroup(t, b, s, 3), startGroup(t, b, s, 3), startGroup(t, b, s, 3)

	if !outbox.RecordsCompleted(viaRecord.successes()) {
		t.Fatal("Record would send a batch of successes to record.sql")
	}
	if r, err := s.Record(ctx, viaRecord.successes()); err != nil || len(r.IDs) != 3 || len(r.Circuits) != 0 {
		t.Fatalf("Record = %+v, %v; want the 3 rows, no circuit change", r, err)
	}
	r, held, err := s.RecordCompleted(ctx, viaCompleted.successes())
	if err != nil || held || len(r.IDs) != 3 {
		t.Fatalf("record_completed = %+v, held %v, %v; want the 3 rows", r, held, err)
	}
	if r, err := s.WithRecordSQLOnly().Record(ctx, viaRecordSQL.successes()); err != nil || len(r.IDs) != 3 {
		t.Fatalf("record.sql = %+v, %v; want the 3 rows", r, err)
	}

	want := viaRecordSQL.written(t, b.f)
	if !strings.Contains(want, "completed | 1 | ref-1 | AUTHORISED | - | t | t | t | t | t | 0 | 1 completed f 00:00:00.001 t 201 - ref-1 AUTHORISED -") ||
		!strings.HasSuffix(want, "waiter: queued | t | t") {
		t.Fatalf("record.sql wrote, per job and for the waiting row:\n%s\nwant completed rows, one attempt each, the waiting row woken", want)
	}
	for name, g := range map[string]startedGroup{"Record": viaRecord, "record_completed": viaCompleted} {
		if got := g.written(t, b.f); got != want {
			t.Errorf("%s wrote:\n%s\nrecord.sql wrote:\n%s", name, got, want)
		}
	}

	// The repeat.
	if r, err := s.Record(ctx, viaRecord.successes()); err != nil || len(r.IDs) != 0 {
		t.Errorf("a repeated Record = %+v, %v; want nothing recorded", r, err)
	}
	if r, held, err := s.RecordCompleted(ctx, viaCompleted.successes()); err != nil || held || len(r.IDs) != 0 {
		t.Errorf("a repeated record_completed = %+v, held %v, %v; want nothing recorded", r, held, err)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_attempts where organization_id = $1`, b.org); n != 9 {
		t.Errorf("%d attempts after the repeats, want 9", n)
	}
}

// Only a batch whose every outcome is a charged success waiting for
// nothing goes to record_completed.sql.
func TestRecordSendsOnlySuccessesToRecordCompleted(t *testing.T) {
	t.Parallel()
	ok := outbox.Outcome{OutboxID: "a", Status: outbox.StatusCompleted, Circuit: outbox.CircuitSuccess}
	for _, c := range []struct {
		name string
		edit func(*outbox.Outcome)
		want bool
	}{
		{"a success", func(*outbox.Outcome) {}, true},
		{"a success without a provider call", func(o *outbox.Outcome) { o.Circuit = "" }, true},
		{"a failure", func(o *outbox.Outcome) { o.Status, o.Circuit = outbox.StatusFailed, outbox.CircuitFailure }, false},
		{"completed, its circuit a failure", func(o *outbox.Outcome) { o.Circuit = outbox.CircuitFailure }, false},
		{"dead-lettered", func(o *outbox.Outcome) { o.Status, o.Circuit = outbox.StatusDeadLetter, "" }, false},
		{"accepted (processing)", func(o *outbox.Outcome) { o.Status = outbox.StatusProcessing }, false},
		{"unsupported", func(o *outbox.Outcome) { o.Status, o.Circuit = outbox.StatusUnsupported, "" }, false},
		{"uncharged", func(o *outbox.Outcome) { o.Uncharged = true }, false},
		{"waiting for a row", func(o *outbox.Outcome) { o.WaitingFor = "b" }, false},
	} {
		other := ok
		c.edit(&other)
		if got := outbox.RecordsCompleted([]outbox.Outcome{ok, other}); got != c.want {
			t.Errorf("a success and %s: record_completed %v, want %v", c.name, got, c.want)
		}
	}
}

// A success on a connection with something to clear (a circuit's
// failures, an open circuit, a failing period, a disable, an unauthorized
// mark, their conflicts) is not recorded by record_completed.sql, which
// writes nothing: Record then sends it to record.sql, which clears it.
func TestASuccessWithSomethingToClearGoesToRecord(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, set, cleared string
	}{
		{"consecutive failures", `insert into integration_outbox_connection_health (connection_id, organization_id, consecutive_failures)
			values ($1, $2, 2)`,
			`select consecutive_failures = 0 from integration_outbox_connection_health where connection_id = $1`},
		{"an open circuit", `insert into integration_outbox_connection_health (connection_id, organization_id, open_until, opened_count, opened_at)
			values ($1, $2, now() - interval '1 second', 1, now() - interval '1 minute')`,
			`select open_until is null from integration_outbox_connection_health where connection_id = $1`},
		{"a failing period", `insert into integration_outbox_connection_state (connection_id, organization_id, failing_since)
			values ($1, $2, now() - interval '1 minute')`,
			`select failing_since is null from integration_outbox_connection_state where connection_id = $1`},
		{"a disable", `insert into integration_outbox_connection_state (connection_id, organization_id, disabled_at, disabled_reason)
			values ($1, $2, now(), 'test')`,
			`select disabled_at is null from integration_outbox_connection_state where connection_id = $1`},
		{"an unauthorized mark", `insert into integration_outbox_connection_state (connection_id, organization_id, unauthorized_since, unauthorized_reason)
			values ($1, $2, now(), 'test')`,
			`select unauthorized_since is null from integration_outbox_connection_state where connection_id = $1`},
		{"a failing conflict", `insert into integration_outbox_connection_state (connection_id, organization_id, failing_conflict_id)
			values ($1, $2, gen_random_uuid())`,
			`select failing_conflict_id is null from integration_outbox_connection_state where connection_id = $1`},
		{"a disabled conflict", `insert into integration_outbox_connection_state (connection_id, organization_id, disabled_conflict_id)
			values ($1, $2, gen_random_uuid())`,
			`select disabled_conflict_id is null from integration_outbox_connection_state where connection_id = $1`},
		{"an unauthorized conflict", `insert into integration_outbox_connection_state (connection_id, organization_id, unauthorized_conflict_id)
			values ($1, $2, gen_random_uuid())`,
			`select unauthorized_conflict_id is null from integration_outbox_connection_state where connection_id = $1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			s := b.store.WithCircuit(outbox.Circuit{FailureThreshold: 3, Cooldown: time.Minute})
			g := startGroup(t, b, s, 2)
			// A connection of the batch is clean, the other has c.
			clean := startGroup(t, b, s, 1)
			if _, err := b.f.Pool.Exec(ctx, c.set, g.conn, b.org); err != nil {
				t.Fatal(err)
			}
			outs := append(g.successes(), clean.successes()...)
			r, held, err := s.RecordCompleted(ctx, outs)
			if err != nil || !held || len(r.IDs) != 0 {
				t.Fatalf("record_completed = %+v, held %v, %v; want held, nothing recorded", r, held, err)
			}
			if n := b.f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1 and status = 'processing'`, b.org); n != 3 {
				t.Errorf("%d rows processing after record_completed held, want the 3: it wrote", n)
			}
			if n := b.f.Count(t, `select count(*) from external_integration_attempts where organization_id = $1`, b.org); n != 0 {
				t.Errorf("%d attempts after record_completed held, want none", n)
			}
			if r, err := s.Record(ctx, outs); err != nil || len(r.IDs) != 3 {
				t.Fatalf("Record = %+v, %v; want the 3 rows", r, err)
			}
			if n := b.f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1 and status = 'completed'`, b.org); n != 3 {
				t.Errorf("%d rows completed, want 3", n)
			}
			var cleared bool
			if err := b.f.Pool.QueryRow(ctx, c.cleared, g.conn).Scan(&cleared); err != nil || !cleared {
				t.Errorf("%s is still there after the success (%v): record.sql did not record it", c.name, err)
			}
		})
	}
}
