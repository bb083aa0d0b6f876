package migrations

import "github.com/pressly/goose/v3"

// migration6 made the key rule of integration_outbox_enqueue the worker's
// own: a key the worker could not send as a header value (empty, over 255
// bytes, leading or trailing space or tab, a control character other than
// tab) is refused with SQLSTATE 22023 (invalid_parameter_value) naming
// idempotency_key, instead of being enqueued and dead-lettered without a
// call.
//
// Up applies the one definition (Enqueue), which has that rule: an install
// still on migration 2's body gets today's function here. Down leaves it:
// migration 2's body is not kept to be put back, and Enqueue works at
// version 5 as well.
var migration6 = goose.NewGoMigration(6, applyEnqueue(), nil)
