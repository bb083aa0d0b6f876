package hostschema

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what Inspect reads the catalog with: a connection, a pool or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// FoundColumn is a column of a host table as the catalog has it.
type FoundColumn struct {
	Table, Name string
	// Type is the column's type as PostgreSQL prints it (format_type):
	// "character varying(255)", say.
	Type string
	// Base is the name of the type (pg_type.typname, a domain's base
	// type's): varchar, jsonb, timestamp, or an enum type's name.
	Base string
	Enum bool
	// Length is the declared length of a varchar(n) or char(n), 0 for none.
	Length     int
	NotNull    bool
	HasDefault bool
	// EnumValues are an enum type's labels.
	EnumValues []string
}

// Found is what the catalog holds of the declared tables: table name →
// its columns, in order. A table the search_path does not find is absent.
type Found map[string][]FoundColumn

// Inspect reads the declared tables' columns from the catalog, as the
// worker's unqualified names find them through the search_path.
func Inspect(ctx context.Context, q Querier) (Found, error) {
	names := make([]string, len(Tables))
	for i, t := range Tables {
		names[i] = t.Name
	}
	rows, err := q.Query(ctx, `
		select t.name, a.attname::text, format_type(a.atttypid, a.atttypmod), b.typname::text, b.typtype = 'e',
		    case when b.typname in ('varchar', 'bpchar') and a.atttypmod > 4 then a.atttypmod - 4 else 0 end,
		    a.attnotnull, a.atthasdef or a.attidentity <> '' or a.attgenerated <> '',
		    coalesce(array(select e.enumlabel::text from pg_enum e where e.enumtypid = b.oid order by e.enumsortorder),
		        '{}'::text[])
		from unnest($1::text[]) with ordinality t(name, ord)
		join pg_attribute a on a.attrelid = to_regclass(t.name) and a.attnum > 0 and not a.attisdropped
		join pg_type ty on ty.oid = a.atttypid
		join pg_type b on b.oid = case when ty.typtype = 'd' then ty.typbasetype else ty.oid end
		order by t.ord, a.attnum`, names)
	if err != nil {
		return nil, fmt.Errorf("reading the host's tables from the catalog: %w", err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FoundColumn])
	if err != nil {
		return nil, fmt.Errorf("reading the host's tables from the catalog: %w", err)
	}
	found := Found{}
	for _, c := range cols {
		found[c.Table] = append(found[c.Table], c)
	}
	return found, nil
}

// Column returns the found column table.name.
func (f Found) Column(table, name string) (FoundColumn, bool) {
	i := slices.IndexFunc(f[table], func(c FoundColumn) bool { return c.Name == name })
	if i < 0 {
		return FoundColumn{}, false
	}
	return f[table][i], true
}

// Stage is when a check runs.
type Stage int

const (
	// BeforeInstall: make migrate, before it changes anything. A missing
	// table is the stand-in's to create, a missing column of ours or enum
	// value the install's to add.
	BeforeInstall Stage = iota
	// Installed: the schema check after an install (outboxctl check):
	// everything must be there.
	Installed
)

// Problem is one thing about a host table the worker cannot work with.
type Problem struct {
	Table, Column string
	// What is wrong and what to do.
	Message string
}

func (p Problem) String() string {
	if p.Column == "" {
		return p.Table + ": " + p.Message
	}
	return p.Table + "." + p.Column + ": " + p.Message
}

// Problems is the list of problems as one error (nil for none).
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "; ")
}

// Err is ps as an error, or nil when it is empty.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// Check compares what the catalog holds with the declaration.
func (f Found) Check(stage Stage) Problems {
	var ps Problems
	for _, t := range Tables {
		cols, ok := f[t.Name]
		if !ok {
			if stage == Installed {
				ps = append(ps, Problem{t.Name, "", "the search_path finds no such table: run make migrate (it creates a stand-in where the host has none)"})
			}
			continue
		}
		for _, want := range t.Columns {
			got, ok := f.Column(t.Name, want.Name)
			if !ok {
				switch {
				case want.Owner == Host:
					ps = append(ps, Problem{t.Name, want.Name, fmt.Sprintf("missing: the worker reads it and the host's table must have it "+
						"(for example: alter table %s add column %s %s)", t.Name, want.Name, firstWord(want.StandIn))})
				case want.Owner == Ours && stage == Installed:
					ps = append(ps, Problem{t.Name, want.Name, "missing: the install adds it; run make migrate"})
				}
				continue
			}
			if want.Owner == Ours && stage == BeforeInstall {
				continue // the install's own look at a column of ours says what to do
			}
			ps = append(ps, checkColumn(t, want, got, stage)...)
		}
		if t.Inserts {
			ps = append(ps, checkInserts(t, cols)...)
		}
	}
	return ps
}

// accepts is the types each kind accepts, by pg_type.typname.
var accepts = map[Kind][]string{
	UUID:      {"uuid"},
	Text:      {"text", "varchar", "bpchar"},
	Status:    {"text", "varchar", "bpchar"}, // and enums
	JSON:      {"json", "jsonb"},
	Timestamp: {"timestamp", "timestamptz"},
	Integer:   {"int2", "int4", "int8"},
}

var kindNames = map[Kind]string{
	UUID:      "uuid",
	Text:      "text, varchar(n) or char(n)",
	Status:    "text, varchar(n) or an enum type",
	JSON:      "json or jsonb",
	Timestamp: "timestamp with or without time zone",
	Integer:   "smallint, integer or bigint",
	Any:       "any",
}

func checkColumn(t Table, want Column, got FoundColumn, stage Stage) Problems {
	if want.Kind == Any {
		return nil
	}
	ok := slices.Contains(accepts[want.Kind], got.Base) || (want.Kind == Status && got.Enum)
	if !ok {
		msg := fmt.Sprintf("is %s; the worker needs %s", got.Type, kindNames[want.Kind])
		if want.Kind == UUID {
			msg += " (ids are uuid in the contract: a table with other ids cannot be shared with the worker)"
		}
		return Problems{{t.Name, want.Name, msg}}
	}
	longest := ""
	for _, v := range want.Values {
		if len(v) > len(longest) {
			longest = v
		}
	}
	switch {
	case got.Enum && stage == Installed:
		var missing []string
		for _, v := range want.Values {
			if !slices.Contains(got.EnumValues, v) {
				missing = append(missing, v)
			}
		}
		if len(missing) > 0 {
			return Problems{{t.Name, want.Name, fmt.Sprintf("its enum type %s lacks %s, which the worker writes: run make migrate (it adds them)",
				got.Base, strings.Join(missing, ", "))}}
		}
	case got.Length > 0 && len(longest) > got.Length:
		return Problems{{t.Name, want.Name, fmt.Sprintf("is %s, too short for the worker's value %q (%d characters): widen it "+
			"(alter table %s alter column %s type varchar(%d))", got.Type, longest, len(longest), t.Name, want.Name, len(longest))}}
	}
	return nil
}

// checkInserts: every NOT NULL column of a table the worker inserts into
// must have a default, unless the worker's inserts name it.
func checkInserts(t Table, cols []FoundColumn) Problems {
	var ps Problems
	for _, c := range cols {
		if !c.NotNull || c.HasDefault || slices.Contains(t.Inserted, c.Name) {
			continue
		}
		ps = append(ps, Problem{t.Name, c.Name, fmt.Sprintf("is NOT NULL without a default, and the worker inserts rows that do not name it: "+
			"give it a default (alter table %s alter column %s set default ...) or allow null", t.Name, c.Name)})
	}
	return ps
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// KindName is what a kind accepts, in words (docs/deploy.md's table).
func KindName(k Kind) string { return kindNames[k] }
