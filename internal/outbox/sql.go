package outbox

import (
	"embed"
	"regexp"
	"strings"
)

// Every statement on the outbox aggregate lives in sql/, one file per
// statement named after what it does, its documentation in the file's
// leading comment; the parts the claim and the record share or repeat live
// in sql/fragment/. Each statement is scoped by organization_id, and every
// write that follows a claim is fenced by the claim_token the claim handed
// out. Their arguments are named (pgx.NamedArgs).
//
//go:embed sql/*.sql sql/fragment/*.sql
var sqlFiles embed.FS

// The statements, read once at package init.
var (
	claimSetupSQL        = statement("claim_setup")
	claimSQL             = statement("claim")
	deadLetterExpiredSQL = statement("dead_letter_expired")
	releaseSQL           = statement("release")
	unsupportedSQL       = statement("mark_unsupported")
	noConnectionSQL      = statement("dead_letter_no_connection")
	startSQL             = statement("start")
	recordSQL            = statement("record")
	releaseDeadLetterSQL = statement("release_dead_lettered")
)

// fragmentMarker is where a statement takes sql/fragment/<name>.sql.
var fragmentMarker = regexp.MustCompile(`/\*fragment:([a-z_]+)\*/`)

// statement returns sql/<name>.sql as it is sent (see sqlText).
func statement(name string) string { return sqlText("sql/" + name + ".sql") }

// sqlText returns the statement or fragment in the file path: without its
// leading "--" lines (its documentation) and its final newline, each
// /*fragment:name*/ marker replaced by the fragment sql/fragment/name.sql,
// itself read this way. A missing file is a mistake of the build, caught by
// any test: it panics.
func sqlText(path string) string {
	b, err := sqlFiles.ReadFile(path)
	if err != nil {
		panic("outbox: reading its SQL: " + err.Error())
	}
	text := strings.TrimSuffix(string(b), "\n")
	for strings.HasPrefix(text, "--") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return fragmentMarker.ReplaceAllStringFunc(text, func(marker string) string {
		return sqlText("sql/fragment/" + fragmentMarker.FindStringSubmatch(marker)[1] + ".sql")
	})
}
