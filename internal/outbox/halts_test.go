package outbox_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The claim reads the halted connections once per claim (fragment/halts.sql):
// from our own tables, which keep a row per connection that ever failed,
// was paced or was stopped, it reads only the halted ones, through their
// partial indexes (migration 17), so that read costs what is halted and not
// every connection with a history.
func TestHaltsAreReadFromTheirIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	// 20,000 connections with a history, none halted; then one of each kind.
	if _, err := f.Pool.Exec(ctx, `
		insert into integration_outbox_connection_health (connection_id, organization_id, consecutive_failures,
			opened_count, open_until, opened_at)
		select gen_random_uuid(), gen_random_uuid(), 0, 0, null, null from generate_series(1, 20000);
		insert into integration_outbox_connection_pace (connection_id, organization_id, next_call_at, paused_until)
		select gen_random_uuid(), gen_random_uuid(), now(), null from generate_series(1, 20000);
		insert into integration_outbox_connection_state (connection_id, organization_id, failing_since)
		select gen_random_uuid(), gen_random_uuid(), now() from generate_series(1, 20000);
		insert into integration_outbox_connection_health (connection_id, organization_id, consecutive_failures,
			opened_count, open_until, opened_at)
		values ('00000000-0000-4000-8000-000000000001', gen_random_uuid(), 5, 1, now() + interval '1 hour', now()),
		       ('00000000-0000-4000-8000-000000000002', gen_random_uuid(), 5, 1, now() - interval '1 second', now());
		insert into integration_outbox_connection_pace (connection_id, organization_id, next_call_at, paused_until)
		values ('00000000-0000-4000-8000-000000000003', gen_random_uuid(), now(), now() + interval '1 minute'),
		       ('00000000-0000-4000-8000-000000000004', gen_random_uuid(), now(), now() - interval '1 minute');
		insert into integration_outbox_connection_state (connection_id, organization_id, disabled_at)
		values ('00000000-0000-4000-8000-000000000005', gen_random_uuid(), now());
		analyze integration_outbox_connection_health;
		analyze integration_outbox_connection_pace;
		analyze integration_outbox_connection_state`); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("sql/fragment/halts.sql")
	if err != nil {
		t.Fatal(err)
	}
	halts := string(b)
	args := pgx.NamedArgs{"circuit_on": true}
	var open, halfOpen, stopped []string
	if err := f.Pool.QueryRow(ctx, `select open::text[], half_open::text[], stopped::text[] from (`+halts+`) h`, args).
		Scan(&open, &halfOpen, &stopped); err != nil {
		t.Fatal(err)
	}
	slices.Sort(stopped)
	if !slices.Equal(open, []string{"00000000-0000-4000-8000-000000000001"}) ||
		!slices.Equal(halfOpen, []string{"00000000-0000-4000-8000-000000000002"}) ||
		!slices.Equal(stopped, []string{"00000000-0000-4000-8000-000000000003", "00000000-0000-4000-8000-000000000005"}) {
		t.Errorf("halts read open %v, half-open %v, stopped %v", open, halfOpen, stopped)
	}
	for _, index := range []string{"integration_outbox_connection_health_open_idx",
		"integration_outbox_connection_pace_paused_idx", "integration_outbox_connection_state_stopped_idx"} {
		f.CheckPlanUses(t, index, "fragment/halts.sql", halts, args)
	}
}
