package outbox

import (
	"os"
	"testing"
)

// The statements are byte for byte the ones captured in testdata/golden
// before they moved.
func TestStatementsMatchTheirGolden(t *testing.T) {
	for name, sql := range map[string]string{
		"claim": claimSQL, "claim_setup": claimSetupSQL, "dead_letter_expired": deadLetterExpiredSQL,
		"release": releaseSQL, "mark_unsupported": unsupportedSQL, "dead_letter_no_connection": noConnectionSQL,
		"start": startSQL, "record": recordSQL, "release_dead_lettered": releaseDeadLetterSQL,
	} {
		golden, err := os.ReadFile("testdata/golden/" + name + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		if sql != string(golden) {
			t.Errorf("%s differs from testdata/golden/%s.sql:\n%s", name, name, sql)
		}
	}
}
