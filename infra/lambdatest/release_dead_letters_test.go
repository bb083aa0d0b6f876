package lambdatest_test

import (
	"strings"
	"testing"
)

func TestRIEReleaseDeadLettersFunction(t *testing.T) {
	const folder, logicalID = "release-dead-letters", "ReleaseDeadLettersFunction"
	requireLogicalID(t, folder, logicalID)
	bin := bootstrap(t, folder)
	s := newStack(t, folder)
	env := functionEnv(s.DatabaseURL, "")
	delete(env, "PUSH_PURCHASE_ORDER_QUEUE_URL")
	emu := startEmulator(t, logicalID, bin, env)

	for i, ev := range events(t, folder) {
		t.Run(ev.Name, func(t *testing.T) {
			// On an empty migrated database: answered, nothing written.
			s.reset(t)
			inv := emu.invoke(t, ev.Payload)
			if i == 0 {
				logFirstInvoke(t, emu, bin, ev.Name)
			}
			checkPushResponse(t, inv)
			if n := s.count(t, `select count(*) from external_integration_attempts`); n != 0 {
				t.Errorf("%d attempts written on an empty database", n)
			}

			// With the rows the messages claimed (not started): released,
			// attempt kept; the same batch again changes nothing.
			s.seedPush(t, "integrations/acme", "http://127.0.0.1:9/")
			before := s.state(t)
			checkPushResponse(t, emu.invoke(t, ev.Payload))
			if n := s.count(t, `select count(*) from external_integration_outbox where id = any($1) and status = 'failed'
				and attempt_count = 1 and claim_token is null and lease_expires_at is null and next_attempt_at <= now()`,
				[]string{pushRow1, pushRow2}); n != 2 {
				t.Errorf("%d of the 2 rows released (failed, due, attempt kept, no claim)", n)
			}
			if diffs := diffOutside(before, s.state(t), []string{pushRow1, pushRow2}); len(diffs) > 0 {
				t.Errorf("the release changed other rows:\n%s", strings.Join(diffs, "\n"))
			}
			released := s.state(t)
			checkPushResponse(t, emu.invoke(t, ev.Payload))
			if diffs := diffOutside(released, s.state(t), nil); len(diffs) > 0 {
				t.Errorf("a repeated batch changed rows:\n%s", strings.Join(diffs, "\n"))
			}
		})
	}
}
