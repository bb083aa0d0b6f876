package migrations

import "github.com/pressly/goose/v3"

// migration9 made integration_outbox_enqueue cheaper for the common case of
// a new key: it no longer looks the key up among the rows it inserted before
// inserting (a SQL function, planned on every call, probing two indexes); it
// probes the host's own keyed rows, then inserts, and the unique index's on
// conflict tells a repeated key. What it returns is unchanged: the oldest
// row holding the key.
//
// Up applies the one definition (Enqueue), which works that way: an install
// still on migration 2's or 6's body gets today's function here. Down leaves
// it: the earlier bodies are not kept to be put back, and Enqueue works at
// version 8 as well.
var migration9 = goose.NewGoMigration(9, applyEnqueue(), nil)
