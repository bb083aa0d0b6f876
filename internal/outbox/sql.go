package outbox

import (
	"embed"
	"regexp"
	"strings"

	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
)

// Every statement on the outbox aggregate lives in sql/, one file per
// statement named after what it does, its documentation in the file's
// leading comment; a part that two statements share (a rule stated once)
// lives in sql/fragment/. Each statement is scoped by organization_id, and
// every write that follows a claim is fenced by the claim_token the claim
// handed out. Their arguments are named (pgx.NamedArgs) and typed in the SQL.
//
// Every file is valid SQL on its own, so an editor, a linter or PostgreSQL
// can parse it (TestEverySQLFileIsValidSQLOnItsOwn): a statement takes a
// fragment where it writes /*fragment:name*/, stand-in SQL, /*end:name*/;
// the fragment file holds the shared part between /*begin:name*/ and
// /*end:name*/, and around it the stand-in context (the aliases and CTEs the
// part reads) that makes the file a statement of its own.
//
//go:embed sql/*.sql sql/fragment/*.sql
var sqlFiles embed.FS

// The statements, read once at package init.
var (
	claimSetupSQL        = statement("claim_setup")
	claimLockSQL         = statement("claim_lock")
	resetCircuitsSQL     = statement("reset_circuits")
	releaseSQL           = statement("release")
	unsupportedSQL       = statement("mark_unsupported")
	noConnectionSQL      = statement("dead_letter_no_connection")
	peekSQL              = statement("peek")
	releaseDeadLetterSQL = statement("release_dead_lettered")
	textLengthsSQL       = statement("text_lengths")
	wakeFollowersSQL     = statement("wake_followers")
)

// The statements that run through their routines (internal/sqlroutine):
// those that cost far more to plan than to run, on every claim, start and
// record. The claim's settings are claim_setup.sql's, which a plain claim's
// transaction sets instead.
var (
	claimSettings = []sqlroutine.Setting{{Name: "plan_cache_mode", Value: "force_generic_plan"},
		{Name: "enable_bitmapscan", Value: "off"}, {Name: "jit", Value: "off"}}
	jitOff = sqlroutine.Setting{Name: "jit", Value: "off"}
	// genericPlan keeps one plan per server connection, planned again only
	// when a table it reads changes shape or statistics (an ANALYZE).
	genericPlan = sqlroutine.Setting{Name: "plan_cache_mode", Value: "force_generic_plan"}

	claimScheduled = routine("claim_scheduled", claimSettings...)
	claimListed    = routine("claim_listed", claimSettings...)
	idleCheck      = routine("idle", jitOff)
	// The sweep runs once a dispatch run; with the plan chosen per call it
	// was planned at every run (3.4 ms, against 0.26 ms of execution, in
	// the churn of bench/results.md).
	deadLetterExpired = routine("dead_letter_expired", jitOff, genericPlan)
	start             = routine("start", jitOff, genericPlan)
	record            = routine("record", jitOff)
	// recordCompleted records a batch of successes (Store.Record).
	recordCompleted = routine("record_completed", jitOff)
)

// routine is sql/<name>.sql as a statement with a routine.
func routine(name string, settings ...sqlroutine.Setting) *sqlroutine.Statement {
	return sqlroutine.New("outbox/"+name, statement(name), settings...)
}

// Routines are the statements of the package that make migrate installs as
// routines.
func Routines() []*sqlroutine.Statement {
	return []*sqlroutine.Statement{claimScheduled, claimListed, idleCheck, deadLetterExpired, start, record, recordCompleted}
}

// fragmentMarker is where a statement takes sql/fragment/<name>.sql; the
// stand-in SQL after it runs to /*end:<name>*/.
var fragmentMarker = regexp.MustCompile(`/\*fragment:([a-z_]+)\*/`)

// statement returns sql/<name>.sql as it is sent: without its leading "--"
// lines (its documentation), each fragment's stand-in replaced by the
// fragment. A missing file or marker is a mistake of the build, caught by
// any test: it panics.
func statement(name string) string { return expand(sqlfile.Statement(sqlFiles, "outbox", name)) }

// expand replaces each /*fragment:name*/ … /*end:name*/ of text with the
// fragment's part (see fragment). It reads text once, from left to right:
// a fragment put in is expanded already (package initialization builds
// every statement, and a cold start waits for it).
func expand(text string) string {
	var out strings.Builder
	for {
		m := fragmentMarker.FindStringSubmatchIndex(text)
		if m == nil {
			if out.Len() == 0 {
				return text
			}
			out.WriteString(text)
			return out.String()
		}
		name := text[m[2]:m[3]]
		end := strings.Index(text[m[1]:], "/*end:"+name+"*/")
		if end < 0 {
			panic("outbox: a /*fragment:" + name + "*/ marker without its /*end:" + name + "*/")
		}
		out.Grow(len(text))
		out.WriteString(text[:m[0]])
		out.WriteString(fragment(name))
		text = text[m[1]+end+len("/*end:"+name+"*/"):]
	}
}

// fragment returns the shared part of sql/fragment/name.sql: what lies
// between its /*begin:name*/ and /*end:name*/, its own fragments expanded.
func fragment(name string) string {
	text := sqlfile.Statement(sqlFiles, "outbox", "fragment/"+name)
	_, part, ok := strings.Cut(text, "/*begin:"+name+"*/")
	if ok {
		part, _, ok = strings.Cut(part, "/*end:"+name+"*/")
	}
	if !ok {
		panic("outbox: sql/fragment/" + name + ".sql has no /*begin:" + name + "*/ … /*end:" + name + "*/ part")
	}
	return expand(strings.TrimSpace(part))
}

// Statements are every statement of the package as it sends them (its
// fragments put in), for the schema check (internal/schemacheck).
func Statements() []sqlfile.Named {
	out := sqlfile.All(sqlFiles, "outbox")
	for i := range out {
		out[i].SQL = expand(out[i].SQL)
	}
	return out
}
