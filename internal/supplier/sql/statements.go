// Package suppliersql holds the supplier command's statement that runs
// through its routine (internal/sqlroutine), read from the .sql file beside
// it. It is a package of its own so that make migrate (internal/routines)
// can install the routine without depending on the command, which depends
// on the packages whose tests run make migrate.
package suppliersql

import (
	"embed"

	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
)

//go:embed *.sql
var files embed.FS

// Load runs through its routine: one of the three statements of every push
// batch, sent unnamed it would be planned at every batch.
var Load = sqlroutine.New("supplier/load", sqlfile.File(files, "supplier", "load.sql"), sqlroutine.Setting{Name: "jit", Value: "off"})

// Routines are the statements that make migrate installs as routines.
func Routines() []*sqlroutine.Statement { return []*sqlroutine.Statement{Load} }
