// Package migrations embeds the numbered goose migrations of the outbox schema
// and the stand-in of the host application's tables.
package migrations

import "embed"

// FS holds the *.sql migrations, applied in order by internal/migrate. They
// add only what this project owns; their down steps remove only that.
//
//go:embed *.sql
var FS embed.FS

// HostStandIn creates the host application's tables wherever they are missing
// (create table if not exists). internal/migrate applies it before FS and no
// down step ever reverts it: the tables and their rows are the host's.
//
//go:embed standin/host_schema.sql
var HostStandIn string
