package sqlroutine

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StaleAfter is how long Install keeps the routines of other builds: the
// containers of the build a deployment replaces call theirs until they are
// retired; a routine older than this belongs to no running container.
const StaleAfter = 7 * 24 * time.Hour

// commentPrefix begins the comment of every routine of ours; the install
// time after it is what Install's clean-up reads.
const commentPrefix = "integration-outbox statement "

var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_.]*$`)

// Install creates, in the first schema of conn's search_path, the routine
// of each statement the schema lacks, and drops our routines of other
// builds installed more than StaleAfter ago. conn must keep its session
// between statements (make migrate's direct or session-pooled connection):
// each routine is made from its statement's description there. A routine
// reads the tables its statement names as conn's search_path finds them
// (SET search_path FROM CURRENT), wherever its callers' search_path points.
//
// A statement's result types are the host's column types of the day (an id
// column may be uuid or text): after the host changes such a type, make
// migrate must run again (outboxctl check reports a routine that no longer
// matches its statement).
func Install(ctx context.Context, conn *pgx.Conn, stmts []*Statement) (installed int, err error) {
	now := time.Now().UTC()
	for _, s := range stmts {
		def, err := describe(ctx, conn, s)
		if err != nil {
			return installed, err
		}
		have, err := installedRoutine(ctx, conn, s, "current_schema()")
		if err != nil {
			return installed, err
		}
		if have.shape == def.shape() {
			continue
		}
		if have.signature != "" {
			// Made for other column types (the host changed one): its
			// result type cannot be replaced in place.
			if _, err := conn.Exec(ctx, "drop function "+have.signature); err != nil {
				return installed, fmt.Errorf("dropping the outdated routine of %s: %w", s.Name, err)
			}
		}
		if _, err := conn.Exec(ctx, def.sql); err != nil {
			return installed, fmt.Errorf("creating the routine of %s: %w", s.Name, err)
		}
		comment := commentPrefix + s.Name + ", installed " + now.Format(time.RFC3339)
		if _, err := conn.Exec(ctx, "comment on function "+s.routine+" is "+quoteLiteral(comment)); err != nil {
			return installed, fmt.Errorf("commenting the routine of %s: %w", s.Name, err)
		}
		installed++
	}
	current := make([]string, len(stmts))
	for i, s := range stmts {
		current[i] = s.routine
	}
	rows, err := conn.Query(ctx, `select p.oid::regprocedure::text, coalesce(obj_description(p.oid, 'pg_proc'), '')
		from pg_proc p
		where p.proname like $1 and p.pronamespace = current_schema()::regnamespace
		  and p.proname <> all($2::text[])`, escapeLike(Prefix)+"%", current)
	if err != nil {
		return installed, fmt.Errorf("listing the routines of other builds: %w", err)
	}
	type old struct{ Signature, Comment string }
	others, err := pgx.CollectRows(rows, pgx.RowToStructByPos[old])
	if err != nil {
		return installed, fmt.Errorf("listing the routines of other builds: %w", err)
	}
	for _, o := range others {
		_, at, _ := strings.Cut(o.Comment, ", installed ")
		t, err := time.Parse(time.RFC3339, at)
		if err == nil && now.Sub(t) < StaleAfter {
			continue
		}
		if _, err := conn.Exec(ctx, "drop function if exists "+o.Signature); err != nil {
			return installed, fmt.Errorf("dropping the routine of another build %s: %w", o.Signature, err)
		}
	}
	return installed, nil
}

// DropAllSQL drops every routine of ours in the first schema of the
// search_path (make migrate down below the version that brought them).
const DropAllSQL = `do $$
declare r record;
begin
    for r in select p.oid::regprocedure as f from pg_proc p
        where p.proname like 'integration\_outbox\_sql\_%' and p.pronamespace = current_schema()::regnamespace
    loop
        execute format('drop function %s', r.f);
    end loop;
end $$`

// definition is s's routine as make migrate creates it.
type definition struct {
	routine string
	// params and results are the types of its parameters and result
	// columns (format_type's names).
	params, results []string
	// sql is its CREATE FUNCTION.
	sql string
}

// shape is the routine's signature and result as PostgreSQL gives them
// back for an installed routine (installedRoutine).
func (d definition) shape() string {
	return d.routine + "(" + strings.Join(d.params, ", ") + ") returns TABLE(" + strings.Join(d.columns(), ", ") + ")"
}

// columns are its result columns, named by position (a statement may name
// two alike, "coalesce"): callers read a routine's rows by position.
func (d definition) columns() []string {
	cols := make([]string, len(d.results))
	for i, t := range d.results {
		cols[i] = fmt.Sprintf("column_%d %s", i+1, t)
	}
	return cols
}

// describe makes s's routine's definition: its CREATE FUNCTION, its parameters and
// result columns as PostgreSQL describes the statement on conn, its body
// the statement itself (RETURN QUERY), positional parameters for its named
// arguments. Names in the statement are the tables' columns, never the
// routine's variables (#variable_conflict use_column), so the statement
// means what it means when sent plain. Its result columns are named by
// position (column_1, …): callers read them by position.
func describe(ctx context.Context, conn *pgx.Conn, s *Statement) (definition, error) {
	desc, err := conn.PgConn().Prepare(ctx, "", s.positional, nil)
	if err != nil {
		return definition{}, fmt.Errorf("describing %s: %w", s.Name, err)
	}
	oids := make([]uint32, 0, len(desc.ParamOIDs)+len(desc.Fields))
	oids = append(oids, desc.ParamOIDs...)
	for _, f := range desc.Fields {
		oids = append(oids, f.DataTypeOID)
	}
	rows, err := conn.Query(ctx, `select format_type(t, null) from unnest($1::oid[]) with ordinality as u(t, n) order by n`, oids)
	if err != nil {
		return definition{}, fmt.Errorf("naming the types of %s: %w", s.Name, err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return definition{}, fmt.Errorf("naming the types of %s: %w", s.Name, err)
	}
	if len(desc.Fields) == 0 {
		return definition{}, fmt.Errorf("routine of %s: the statement returns no columns (a routine returns its rows)", s.Name)
	}
	d := definition{routine: s.routine, params: types[:len(desc.ParamOIDs)], results: types[len(desc.ParamOIDs):]}
	var b strings.Builder
	fmt.Fprintf(&b, "create or replace function %s(%s)\nreturns table (%s)\nlanguage plpgsql volatile\nset search_path from current\n",
		s.routine, strings.Join(d.params, ", "), strings.Join(d.columns(), ", "))
	for _, st := range s.Settings {
		if !settingName.MatchString(st.Name) {
			return definition{}, fmt.Errorf("routine of %s: bad setting name %q", s.Name, st.Name)
		}
		fmt.Fprintf(&b, "set %s = %s\n", st.Name, quoteLiteral(st.Value))
	}
	// The statement may end in a comment: the semicolon goes on a line of its own.
	body := "#variable_conflict use_column\nbegin\nreturn query\n" + strings.TrimRight(strings.TrimSpace(s.positional), ";") + "\n;\nend\n"
	if strings.Contains(body, "$integration_outbox$") {
		return definition{}, fmt.Errorf("routine of %s: the statement holds the body's quote", s.Name)
	}
	b.WriteString("as $integration_outbox$\n" + body + "$integration_outbox$")
	d.sql = b.String()
	return d, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// Problem is a statement whose routine is missing or no longer matches it.
type Problem struct {
	Statement string
	Reason    string
}

func (p Problem) String() string { return p.Statement + ": " + p.Reason }

// Check compares each statement's routine, as its callers' search_path
// finds it, with the routine Install would make now: missing (the functions
// send the statement plain, planned at every call: run make migrate), or
// made for other column types than the host's tables have today (a call
// fails: run make migrate). conn may be in a transaction.
func Check(ctx context.Context, conn *pgx.Conn, stmts []*Statement) ([]Problem, error) {
	var problems []Problem
	for _, s := range stmts {
		have, err := installedRoutine(ctx, conn, s, "")
		if err != nil {
			return nil, err
		}
		if have.signature == "" {
			problems = append(problems, Problem{s.Name, "its routine " + s.routine + " is missing: the functions send the statement plain, " +
				"planned at every call (run make migrate with this build)"})
			continue
		}
		def, err := describe(ctx, conn, s)
		if err != nil {
			return nil, err
		}
		if want := def.shape(); want != have.shape {
			problems = append(problems, Problem{s.Name, "its routine " + s.routine + " was made for other column types than the host's tables have now " +
				"(run make migrate: it makes it anew; meanwhile the functions send the statement plain after a call fails): installed " + have.shape + ", now " + want})
		}
	}
	return problems, nil
}

// present is a routine as installed: its signature (regprocedure's text,
// "" when there is none) and its shape (definition.shape's form).
type present struct{ signature, shape string }

// installedRoutine reads s's routine in schema (an SQL expression of a
// schema's name), or as the search_path finds it when schema is "".
func installedRoutine(ctx context.Context, conn *pgx.Conn, s *Statement, schema string) (present, error) {
	find := `select p.oid from pg_proc p where p.proname = $1 and p.pronamespace = ` + schema + `::regnamespace`
	if schema == "" {
		find = `select to_regproc($1)::oid`
	}
	var r present
	var args, result *string
	err := conn.QueryRow(ctx, `select p::regprocedure::text, pg_get_function_identity_arguments(p), pg_get_function_result(p)
		from (`+find+`) r(p) where p is not null`, s.routine).Scan(&r.signature, &args, &result)
	if err == pgx.ErrNoRows {
		return present{}, nil
	}
	if err != nil {
		return present{}, fmt.Errorf("reading the routine of %s: %w", s.Name, err)
	}
	r.shape = fmt.Sprintf("%s(%s) returns %s", s.routine, *args, *result)
	return r, nil
}
