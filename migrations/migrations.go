// Package migrations embeds the numbered goose migrations of the outbox schema
// and the stand-in of the host application's tables.
package migrations

import (
	"embed"

	"github.com/pressly/goose/v3"

	"integration-outbox/internal/hostschema"
)

// FS holds the *.sql migrations, applied in order by internal/migrate. They
// add only what this project owns; their down steps remove only that.
//
//go:embed *.sql
var FS embed.FS

// Go are the migrations written in Go, applied in version order with the
// .sql files of FS: those that install or change the enqueue function, each
// by applying its one definition (Enqueue).
var Go = []*goose.Migration{migration2, migration6, migration9, migration12, migration22, migration23, migration25, migration26}

// HostStandIn creates the host application's tables wherever they are
// missing, with exactly the columns internal/hostschema declares.
// internal/migrate applies it before FS and no down step ever reverts it:
// the tables and their rows are the host's.
var HostStandIn = hostschema.StandInSQL()
