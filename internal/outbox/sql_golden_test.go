package outbox

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

// position is a positional argument ($1).
var position = regexp.MustCompile(`\$[0-9]+`)

// The statements are the ones captured in testdata/golden before they moved:
// byte for byte, or, for those whose arguments were positional, byte for
// byte once pgx has put positions in place of the names and each is
// numbered as the golden numbered its name.
func TestStatementsMatchTheirGolden(t *testing.T) {
	claims := []string{"ids", "organization_ids", "claim_tokens", "connection_ids"}
	for _, c := range []struct {
		name, sql string
		// positional are the argument names in the order of the golden's $1,
		// $2, ...; nil when the golden's arguments were already named.
		positional []string
	}{
		{"claim", claimSQL, nil},
		{"record", recordSQL, nil},
		{"claim_setup", claimSetupSQL, []string{"lock_key"}},
		{"dead_letter_expired", deadLetterExpiredSQL, []string{"max_attempts", "organization_id", "ids"}},
		{"release", releaseSQL, claims},
		{"mark_unsupported", unsupportedSQL, append(slices.Clone(claims), "reason")},
		{"dead_letter_no_connection", noConnectionSQL, claims[:3]},
		{"start", startSQL, append(slices.Clone(claims), "lease_until")},
		{"release_dead_lettered", releaseDeadLetterSQL, append(slices.Clone(claims), "max_attempts")},
	} {
		golden, err := os.ReadFile("testdata/golden/" + c.name + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		sql := c.sql
		if c.positional != nil {
			// Each name bound to itself: the rewritten arguments say which
			// name took which position.
			named := pgx.NamedArgs{}
			for _, n := range c.positional {
				named[n] = n
			}
			var args []any
			sql, args, err = named.RewriteQuery(context.Background(), nil, c.sql, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Number each name as its golden numbered it.
			sql = position.ReplaceAllStringFunc(sql, func(p string) string {
				i, _ := strconv.Atoi(p[1:])
				name, _ := args[i-1].(string) // nil: a name the golden did not have
				return fmt.Sprintf("$%d", slices.Index(c.positional, name)+1)
			})
			if len(args) != len(c.positional) {
				t.Errorf("%s takes %d arguments, its golden took %d", c.name, len(args), len(c.positional))
			}
		}
		if sql != string(golden) {
			t.Errorf("%s differs from testdata/golden/%s.sql:\n%s", c.name, c.name, sql)
		}
	}
}
