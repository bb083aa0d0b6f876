package hostschema

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsSchemaError reports whether err is PostgreSQL refusing a statement for
// a reason of the tables' shape, not of the moment: a table, column,
// function or type the statement names is missing or of another type
// (SQLSTATE class 42), a value does not fit its column (22001 too long,
// 22003 out of range, 22P02 not a value of the type: an enum without it),
// or a constraint the host added refuses what the worker writes (23502 a
// NOT NULL column the statement does not name, 23514 a check). Trying
// again does not help until the tables change: the worker counts it
// (the SchemaErrors metric) and says which statement failed, and
// outboxctl check says what is wrong.
func IsSchemaError(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return false
	}
	if len(pg.Code) == 5 && pg.Code[:2] == "42" {
		return true
	}
	switch pg.Code {
	case "22001", "22003", "22P02", "23502", "23514":
		return true
	}
	return false
}
