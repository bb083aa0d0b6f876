package hostshapetest

import (
	"context"
	"strings"
	"testing"

	"integration-outbox/internal/schemacheck"
	"integration-outbox/internal/testenv"
)

// TestAHostChangingItsTablesAfterTheInstallLosesNoRow: the host changes
// its tables after make migrate. A NOT NULL column added to the conflicts
// does not take the batch's other results with it (the refused one is
// recorded without its conflict, the refusal in its attempt's history); a
// shortened varchar gets cut text; a column the worker reads, gone, keeps
// every row queued. Each time the functions name the statement and
// PostgreSQL's error, count SchemaErrors, and the schema check says what is
// wrong; once the table is fixed, the rows go on.
func TestAHostChangingItsTablesAfterTheInstallLosesNoRow(t *testing.T) {
	t.Parallel()
	standIn := testenv.HostShape{Name: "stand-in"}
	ctx := context.Background()

	t.Run("a NOT NULL column added to the conflicts", func(t *testing.T) {
		t.Parallel()
		p := newPipeline(t, standIn)
		p.alter(t, `alter table external_integration_conflicts add column reviewed_by text not null`)
		ok, rejected := p.order(t, "PO-1"), p.order(t, "PO-2")
		p.supply.say(rejected, answer{status: 422, body: `{"error":"unknown supplier"}`})
		ids := map[string]string{ok: p.enqueue(t, ok), rejected: p.enqueue(t, rejected)}
		p.runAllowingErrors(t)
		p.expect(t, ids[ok], "completed")
		p.expect(t, ids[rejected], "dead_letter")
		if n := p.count(t, `select count(*) from external_integration_conflicts`); n != 0 {
			t.Errorf("%d conflicts written into a table that refuses them", n)
		}
		if e := p.text(t, `select error_excerpt from external_integration_attempts where outbox_id = $1`, ids[rejected]); !strings.Contains(e, "recorded without its conflict") ||
			!strings.Contains(e, "reviewed_by") {
			t.Errorf("the attempt's history does not say why the conflict is missing: %q", e)
		}
		p.saysSchemaError(t, "outbox/record", "reviewed_by")
		p.checkSays(t, "external_integration_conflicts.reviewed_by: is NOT NULL without a default")
	})

	t.Run("a varchar shortened", func(t *testing.T) {
		t.Parallel()
		p := newPipeline(t, standIn)
		p.alter(t, `alter table external_integration_conflicts alter column summary type varchar(40)`)
		rejected := p.order(t, "PO-3")
		p.supply.say(rejected, answer{status: 422, body: `{"error":"unknown supplier, and a long explanation of why"}`})
		id := p.enqueue(t, rejected)
		p.run(t)
		p.expect(t, id, "dead_letter")
		summary := p.text(t, `select summary from external_integration_conflicts where outbox_id = $1`, id)
		if len([]rune(summary)) != 40 || !strings.HasSuffix(summary, "…") {
			t.Errorf("summary %q (%d characters) is not cut to the new 40 with its mark", summary, len([]rune(summary)))
		}
	})

	t.Run("the outbox's last_error shortened while the push function runs", func(t *testing.T) {
		t.Parallel()
		p := newPipeline(t, standIn)
		first := p.order(t, "PO-5")
		p.expectRun(t, p.enqueue(t, first), "completed") // the push function has read the lengths
		p.alter(t, `alter table external_integration_outbox alter column last_error type varchar(40)`)
		rejected := p.order(t, "PO-6")
		p.supply.say(rejected, answer{status: 422, body: `{"error":"unknown supplier, and a long explanation of why"}`})
		id := p.enqueue(t, rejected)
		p.run(t)
		p.expect(t, id, "dead_letter")
		if e := p.text(t, `select last_error from external_integration_outbox where id = $1`, id); len([]rune(e)) != 40 || !strings.HasSuffix(e, "…") {
			t.Errorf("last_error %q (%d characters) is not cut to the new 40 with its mark", e, len([]rune(e)))
		}
	})

	t.Run("a column the worker reads, gone", func(t *testing.T) {
		t.Parallel()
		p := newPipeline(t, standIn)
		o := p.order(t, "PO-4")
		id := p.enqueue(t, o)
		p.alter(t, `alter table external_integration_outbox rename column provider_status to provider_state`)
		p.runAllowingErrors(t)
		p.expect(t, id, "queued")
		p.saysSchemaError(t, "outbox/", "provider_status")
		p.checkSays(t, "external_integration_outbox.provider_status: missing")

		p.alter(t, `alter table external_integration_outbox rename column provider_state to provider_status`)
		p.run(t)
		p.expect(t, id, "completed")
	})
	_ = ctx
}

// expectRun runs the pipeline once and expects the row in status.
func (p *pipeline) expectRun(t *testing.T, id, status string) {
	t.Helper()
	p.run(t)
	p.expect(t, id, status)
}

func (p *pipeline) alter(t *testing.T, sql string) {
	t.Helper()
	if _, err := p.conn.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

func (p *pipeline) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := p.conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// saysSchemaError: the functions logged the statement and PostgreSQL's
// error, and counted SchemaErrors.
func (p *pipeline) saysSchemaError(t *testing.T, statement, pgError string) {
	t.Helper()
	logs := p.logs.String()
	found := false
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "reason of the tables' shape") && strings.Contains(line, `"statement":"`+statement) &&
			strings.Contains(line, pgError) {
			found = true
		}
	}
	if !found {
		t.Errorf("no log line names the statement %s and the error %q:\n%s", statement, pgError, logs)
	}
	if !strings.Contains(logs, `"SchemaErrors":1`) {
		t.Errorf("SchemaErrors was not counted:\n%s", logs)
	}
}

// checkSays: the schema check names the problem.
func (p *pipeline) checkSays(t *testing.T, want string) {
	t.Helper()
	r, err := schemacheck.Run(context.Background(), p.conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the schema check says %v, want %q", err, want)
	}
}
