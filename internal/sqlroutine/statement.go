// Package sqlroutine keeps the plans of our costliest statements where a
// transaction pooler cannot drop them: in PL/pgSQL functions ("routines")
// that make migrate installs, one per statement, each running the statement
// as it is written in its .sql file.
//
// A named prepared statement keeps its plan on the client's session, and a
// transaction pooler (PgBouncer in transaction mode, RDS Proxy) hands each
// transaction another server connection: the statement is gone, or the
// proxy pins the session to keep it. Our connections therefore send only
// unnamed statements (internal/pgtx), which PostgreSQL plans at every call.
// A PL/pgSQL function's statements are planned once per server connection
// and their plans kept there (the same plan cache as a prepared statement's,
// custom plans first, a generic one when it is as good), and server
// connections outlive the clients a pooler multiplexes onto them. The call
// of a routine is itself a one-line statement, cheap to plan.
//
// A routine is named after its statement and a hash of the statement's text
// and settings (Statement.Routine), so a build only calls the routines made
// from its own SQL. Where the database lacks them (code deployed before
// make migrate ran), the Catalog sends the plain statement instead: the same
// result, planned at every call, and outboxctl check says so.
package sqlroutine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Prefix begins the name of every routine of ours.
const Prefix = "integration_outbox_sql_"

// generatorVersion is part of every routine's hash: a change of how routines
// are made (Install's definition) names them anew.
const generatorVersion = "1"

// Setting is a parameter the routine sets for its own run (CREATE FUNCTION
// … SET name = value): PostgreSQL restores it when the routine returns, so
// nothing outlives the call on the server connection.
type Setting struct{ Name, Value string }

// Statement is one statement run through its routine when the database has
// it.
type Statement struct {
	// Name is the statement's name in the logs (e.g. "outbox/claim_scheduled").
	Name string
	// SQL is the statement as sent plain, with named arguments (@name).
	SQL string
	// Settings hold while the statement runs, in its routine and, for the
	// plain statement, in the caller's transaction (Catalog.Setup).
	Settings []Setting

	routine    string
	positional string
	args       []string
}

// namedArg finds the candidates for named arguments; pgx's own rewriting
// (pgx.NamedArgs) decides which of them are arguments, so that a name in a
// string or a comment is not taken for one.
var namedArg = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

// New returns the statement name, sql (named arguments) with settings. A
// statement pgx cannot rewrite is a mistake of the build: it panics, as the
// package initialization that calls New is run by every test.
func New(name, sql string, settings ...Setting) *Statement {
	candidates := pgx.NamedArgs{}
	for _, m := range namedArg.FindAllStringSubmatch(sql, -1) {
		candidates[m[1]] = m[1]
	}
	positional, ordered, err := candidates.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		panic(fmt.Sprintf("sqlroutine: statement %s: %v", name, err))
	}
	s := &Statement{Name: name, SQL: sql, Settings: settings, positional: positional}
	for _, a := range ordered {
		s.args = append(s.args, a.(string))
	}
	h := sha256.New()
	h.Write([]byte(generatorVersion + "\x00" + sql))
	for _, st := range settings {
		h.Write([]byte("\x00" + st.Name + "=" + st.Value))
	}
	s.routine = Prefix + strings.NewReplacer("/", "_", "-", "_").Replace(name) + "_" + hex.EncodeToString(h.Sum(nil))[:12]
	if len(s.routine) > 63 {
		panic("sqlroutine: routine name longer than PostgreSQL's 63 bytes: " + s.routine)
	}
	return s
}

// Routine is the name of the statement's routine.
func (s *Statement) Routine() string { return s.routine }

// Args are the statement's arguments in the order of its routine's
// parameters (a name args lacks is null, as pgx.NamedArgs sends it).
func (s *Statement) Args(args pgx.NamedArgs) []any {
	out := make([]any, len(s.args))
	for i, name := range s.args {
		out[i] = args[name]
	}
	return out
}

// Call is the statement that runs the routine with the arguments in order.
func (s *Statement) Call() string {
	var b strings.Builder
	b.WriteString("select * from ")
	b.WriteString(s.routine)
	b.WriteByte('(')
	for i := range s.args {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1))
	}
	b.WriteByte(')')
	return b.String()
}
