// Package sqlfile reads the statements a package keeps in embedded .sql
// files, one statement per file, its documentation in the file's leading
// "--" lines.
package sqlfile

import (
	"context"
	"errors"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Statement returns the statement in fsys's sql/<name>.sql without its
// leading comment. A missing file is a mistake of the build, caught by any
// test of the package that embeds it: it panics, naming owner.
func Statement(fsys fs.FS, owner, name string) string {
	return File(fsys, owner, "sql/"+name+".sql")
}

// File is Statement for the file at path in fsys (a package that embeds
// its .sql files from its own folder).
func File(fsys fs.FS, owner, path string) string {
	b, err := fs.ReadFile(fsys, path)
	if err != nil {
		panic(owner + ": reading its SQL: " + err.Error())
	}
	text := string(b)
	for strings.HasPrefix(text, "--") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return strings.TrimSpace(text)
}

// Positional returns sql as pgx sends it with pgx.NamedArgs: each @name
// replaced by a $n, numbered in the order the names first appear. It is for
// the tests that prepare or explain a statement themselves.
func Positional(sql string) string {
	sql, _, _ = pgx.NamedArgs{}.RewriteQuery(context.Background(), nil, sql, nil) // never fails: not strict
	return sql
}

// Named is a statement under the name the logs and the schema check give
// it: "<package>/<file name>".
type Named struct {
	Name, SQL string
}

// All returns every statement of fsys's sql/*.sql (not its fragments), as
// read by Statement, named "<owner>/<file name>".
func All(fsys fs.FS, owner string) []Named {
	paths, err := fs.Glob(fsys, "sql/*.sql")
	if err != nil || len(paths) == 0 {
		panic(owner + ": no sql/*.sql embedded")
	}
	out := make([]Named, len(paths))
	for i, p := range paths {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "sql/"), ".sql")
		out[i] = Named{Name: owner + "/" + name, SQL: Statement(fsys, owner, name)}
	}
	return out
}

// Error is an error PostgreSQL (or the connection) returned for the
// statement Statement, so that the logs name the statement.
type Error struct {
	Statement string
	Err       error
}

func (e *Error) Error() string { return "statement " + e.Statement + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Wrap is err as an *Error of the statement name (nil stays nil).
func Wrap(name string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Statement: name, Err: err}
}

// StatementOf is the name of the statement err came from, "" when it names
// none.
func StatementOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Statement
	}
	return ""
}
