package sqlroutine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs a statement: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Recheck is how long a Catalog that found a routine missing goes on
// sending the plain statement before it reads the database again (a make
// migrate run while the container lives installs them).
const Recheck = time.Minute

// Catalog knows which of its statements' routines the database has. It
// reads them in one statement at its first use, and again after Recheck
// while one is missing. One Catalog serves a container (it is safe for
// concurrent use).
type Catalog struct {
	stmts []*Statement

	mu      sync.Mutex
	read    time.Time
	present map[string]bool
	// now is the clock (time.Now; tests move it).
	now func() time.Time
	// missing, when set, is told the statements whose routines a read
	// did not find (Notify).
	missing func(names []string)
}

// Notify makes c tell f, after each read of the database that finds
// routines missing, the names of their statements (a container logs
// them: its statements then run plain, planned at every call). It returns
// c.
func (c *Catalog) Notify(f func(statements []string)) *Catalog {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.missing = f
	return c
}

// NewCatalog returns the catalog of stmts' routines; nothing is read yet.
func NewCatalog(stmts ...*Statement) *Catalog {
	return &Catalog{stmts: stmts, now: time.Now}
}

// ReadSQL is the catalog's read (once a container): which of the names
// a routine of the search_path has.
const ReadSQL = `select name from unnest($1::text[]) as name where to_regproc(name) is not null`

// Present reports whether the database has s's routine.
func (c *Catalog) Present(ctx context.Context, q Querier, s *Statement) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := c.present == nil
	if !stale && len(c.present) < len(c.stmts) && c.now().Sub(c.read) >= Recheck {
		stale = true
	}
	if stale {
		names := make([]string, len(c.stmts))
		for i, st := range c.stmts {
			names[i] = st.routine
		}
		rows, err := q.Query(ctx, ReadSQL, names)
		if err != nil {
			return false, err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return false, err
		}
		c.present = map[string]bool{}
		for _, n := range found {
			c.present[n] = true
		}
		c.read = c.now()
		if c.missing != nil && len(c.present) < len(c.stmts) {
			var names []string
			for _, st := range c.stmts {
				if !c.present[st.routine] {
					names = append(names, st.Name)
				}
			}
			c.missing(names)
		}
	}
	return c.present[s.routine], nil
}

// gone records that s's routine cannot serve: it was not found when called
// (a newer make migrate dropped it), or PostgreSQL refused the statement
// inside it for a reason of the tables' shape (an error of class 42 raised
// in the routine: the host changed a column's type since the routine was
// made, and the plain statement, described anew, may still work). The next
// calls send the plain statement until the next read, Recheck later.
func (c *Catalog) gone(s *Statement, err error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "42") ||
		!strings.Contains(pgErr.Message+" "+pgErr.Where, s.routine) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.present != nil {
		delete(c.present, s.routine)
		c.read = c.now()
	}
}

// Query runs s with args: its routine where the database has it, else the
// plain statement.
func (c *Catalog) Query(ctx context.Context, q Querier, s *Statement, args pgx.NamedArgs) (pgx.Rows, error) {
	ok, err := c.Present(ctx, q, s)
	if err != nil {
		return nil, err
	}
	if !ok {
		return q.Query(ctx, s.SQL, args)
	}
	rows, err := q.Query(ctx, s.Call(), s.Args(args)...)
	if err != nil {
		c.gone(s, err)
		return nil, err
	}
	return &watchedRows{Rows: rows, c: c, s: s}, nil
}

// QueryRow is Query for a statement that returns one row.
func (c *Catalog) QueryRow(ctx context.Context, q Querier, s *Statement, args pgx.NamedArgs) pgx.Row {
	rows, err := c.Query(ctx, q, s, args)
	return oneRow{rows: rows, err: err}
}

// watchedRows notices a routine that was dropped after the statement was
// described (the error then comes with the rows).
type watchedRows struct {
	pgx.Rows
	c *Catalog
	s *Statement
}

func (r *watchedRows) Err() error {
	err := r.Rows.Err()
	if err != nil {
		r.c.gone(r.s, err)
	}
	return err
}

// oneRow is pgx.Row of a Query: the first row, pgx.ErrNoRows when none.
type oneRow struct {
	rows pgx.Rows
	err  error
}

func (r oneRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
