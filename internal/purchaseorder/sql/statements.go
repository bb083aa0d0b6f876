// Package posql holds the purchase-order command's statements that run
// through routines (internal/sqlroutine), read from the .sql files beside
// it. It is a package of its own so that make migrate (internal/routines)
// can install their routines without depending on the command, which
// depends on the packages whose tests run make migrate.
package posql

import (
	"embed"

	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
)

//go:embed *.sql
var files embed.FS

var jitOff = sqlroutine.Setting{Name: "jit", Value: "off"}

// Load and SupplierLookUp run through their routines: the load is one of
// the three statements of every push batch, and sent unnamed it would be
// planned at every batch.
var (
	Load           = sqlroutine.New("purchaseorder/load", sqlfile.File(files, "purchaseorder", "load.sql"), jitOff)
	SupplierLookUp = sqlroutine.New("purchaseorder/suppliers", sqlfile.File(files, "purchaseorder", "suppliers.sql"), jitOff)
)

// Routines are the statements that make migrate installs as routines.
func Routines() []*sqlroutine.Statement { return []*sqlroutine.Statement{Load, SupplierLookUp} }
