package migrations

import "github.com/pressly/goose/v3"

// migration12: commands enqueued in one transaction keep the order of the
// calls (created_at later than the call before it in the transaction). Up
// applies the one definition (Enqueue), which does so: an install still on
// migration 9's body (or an earlier one) gets today's function here. Down
// leaves it: migration 9's body is not kept to be put back, and Enqueue
// works at version 11 as well (it sets created_at itself, whatever the
// column's default). On the host's table it changes created_at's default
// (internal/migrate hostObjects).
var migration12 = goose.NewGoMigration(12, applyEnqueue(), nil)
