package migrate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/hostschema"
)

// hostTables are the host application's tables that the worker reads or
// adds to, as its queries name them: unqualified, found through the
// search_path.
var hostTables = []string{
	"integration_connections", "purchase_orders", "purchase_order_lines",
	"external_integration_outbox", "external_integration_conflicts",
}

// statuses are the outbox statuses the worker knows; its status check
// (migration 1) allows these and no other.
var statuses = hostschema.OutboxStatuses

// statusCheck is the name of that check constraint.
const statusCheck = "external_integration_outbox_status_check"

// preflight looks at the host's tables before a run changes anything and
// refuses, with what to do, a database the install would harm or leave half
// done: a host table the search_path finds in two schemas (the worker's
// objects would go onto one, the application may use the other), and host
// rows whose status the worker's status check would refuse. It changes
// nothing, but for one repair: a status check an earlier run added and could
// not validate, which refuses the host's writes of those statuses, is
// dropped.
func (in *Installer) preflight(ctx context.Context) error {
	if err := in.refuseShadowedTables(ctx); err != nil {
		return err
	}
	if err := in.refuseUnfitTables(ctx); err != nil {
		return err
	}
	return in.refuseUnknownStatuses(ctx)
}

// refuseUnfitTables checks the host's tables against what the worker needs
// of them (internal/hostschema): a column the host must have and lacks, a
// type the worker cannot work with, a NOT NULL column without a default on
// a table the worker inserts into, a varchar too short for a value the
// worker writes. Each is named, with what to do; nothing is changed.
func (in *Installer) refuseUnfitTables(ctx context.Context) error {
	found, err := hostschema.Inspect(ctx, in.conn)
	if err != nil {
		return err
	}
	problems := found.Check(hostschema.BeforeInstall)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("the host's tables do not have what the worker needs (docs/deploy.md, \"What the worker needs of the host's tables\"): %w; "+
		"nothing was changed. Change the tables as said, then run make migrate again", problems)
}

// addEnumValues adds to the host's enum types of status columns the values
// the worker writes that they lack (uncertain and unsupported, say), before
// any migration builds an index or runs a statement that names them. Each
// is its own ALTER TYPE ... ADD VALUE (a catalog insert; no host table is
// locked or rewritten). PostgreSQL cannot remove a value from an enum, so
// no down step takes them away again: the host's rows may hold them.
func (in *Installer) addEnumValues(ctx context.Context) error {
	found, err := hostschema.Inspect(ctx, in.conn)
	if err != nil {
		return err
	}
	for _, t := range hostschema.Tables {
		for _, c := range t.Columns {
			got, ok := found.Column(t.Name, c.Name)
			if !ok || !got.Enum {
				continue
			}
			for _, v := range c.Values {
				if slices.Contains(got.EnumValues, v) {
					continue
				}
				stmt := fmt.Sprintf("alter type %s add value if not exists %s", got.Type, quoteLiteral(v))
				if err := in.briefExec(ctx, stmt); err != nil {
					return fmt.Errorf("adding the status %s to the enum type of %s.%s: %w", v, t.Name, c.Name, err)
				}
				in.log.InfoContext(ctx, "added a status the worker writes to the host's enum type",
					"table", t.Name, "column", c.Name, "type", got.Type, "value", v)
			}
		}
	}
	return nil
}

// statusIsEnum reports whether the host's outbox status is of an enum type,
// whose values already limit what the column holds.
func (in *Installer) statusIsEnum(ctx context.Context) (bool, error) {
	found, err := hostschema.Inspect(ctx, in.conn)
	if err != nil {
		return false, err
	}
	got, ok := found.Column(outbox, "status")
	return ok && got.Enum, nil
}

func (in *Installer) refuseShadowedTables(ctx context.Context) error {
	rows, err := in.conn.Query(ctx, `
		select t.name, array_agg(s.nspname::text order by s.ord), array_to_string(current_schemas(false), ', ')
		from unnest($1::text[]) t(name)
		join pg_class c on c.relname = t.name and c.relkind in ('r', 'p', 'v', 'm', 'f')
		join unnest(current_schemas(false)) with ordinality s(nspname, ord) on c.relnamespace = s.nspname::regnamespace
		group by t.name
		having count(*) > 1
		order by t.name`, hostTables)
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	type shadowed struct {
		Table      string
		Schemas    []string
		SearchPath string
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[shadowed])
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	if len(found) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the search_path (%s) finds a host table in more than one schema, so the worker could add its columns and indexes to a table the application does not use:", found[0].SearchPath)
	for _, s := range found {
		fmt.Fprintf(&b, " %s is in %s (the first is the one the worker would use);", s.Table, strings.Join(s.Schemas, " and "))
	}
	b.WriteString(" nothing was changed. Set the search_path of DATABASE_URL so that the application's schema comes first," +
		" or, where the first is an empty copy an earlier make migrate created in front of the application's table," +
		" check that it holds none of your rows and drop it (drop table <schema>.<table>); then run make migrate again")
	return fmt.Errorf("%s", b.String())
}

// refuseUnknownStatuses reads, where the worker's status check is not yet
// installed and validated, which statuses outside ours the host's rows hold.
func (in *Installer) refuseUnknownStatuses(ctx context.Context) error {
	var exists, checked bool
	err := in.conn.QueryRow(ctx, `
		select to_regclass($1) is not null,
		    coalesce((select k.convalidated from pg_constraint k
		              where k.conrelid = to_regclass($1) and k.conname = $2), false)`,
		outbox, statusCheck).Scan(&exists, &checked)
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	if !exists || checked {
		return nil
	}
	// A read under ACCESS SHARE: no host write waits for it.
	rows, err := in.conn.Query(ctx, fmt.Sprintf(`
		select status, count(*) from %s
		where status is not null and not (status::text = any($1::text[]))
		group by status order by count(*) desc, status`, ident(outbox)), statuses)
	if err != nil {
		return fmt.Errorf("reading the statuses of %s: %w", outbox, err)
	}
	type unknown struct {
		Status string
		Rows   int64
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[unknown])
	if err != nil {
		return fmt.Errorf("reading the statuses of %s: %w", outbox, err)
	}
	if len(found) == 0 {
		return nil
	}
	repaired, err := in.dropUnvalidatedStatusCheck(ctx)
	if err != nil {
		return err
	}
	names := make([]string, len(found))
	counts := make([]string, len(found))
	for i, u := range found {
		names[i] = u.Status
		counts[i] = fmt.Sprintf("%s (%d rows)", quoteLiteral(u.Status), u.Rows)
	}
	changed := "nothing was changed"
	if repaired {
		changed = "the status check an earlier run left unvalidated was dropped, so the host's writes of these statuses work again; nothing else was changed"
	}
	return fmt.Errorf("%s holds rows whose status the worker does not know: %s. Its status check allows only %s, "+
		"and would refuse the host's writes of any other; %s. If these rows are finished commands, give them one of "+
		"those statuses (for example: update %s set status = 'completed' where status in (%s)); if the application "+
		"writes such statuses on purpose, it cannot share this table with the worker until it stops; then run make migrate again",
		outbox, strings.Join(counts, ", "), strings.Join(statuses, ", "), changed, outbox, quoteLiterals(names))
}

// dropUnvalidatedStatusCheck drops the status check where it is ours and
// not validated (an earlier run stopped at its validation), and forgets it.
func (in *Installer) dropUnvalidatedStatusCheck(ctx context.Context) (bool, error) {
	var left bool
	err := in.conn.QueryRow(ctx, `
		select to_regclass('integration_outbox_owned_objects') is not null
		   and exists (select 1 from pg_constraint k where k.conrelid = to_regclass($1) and k.conname = $2 and not k.convalidated)`,
		outbox, statusCheck).Scan(&left)
	if err != nil {
		return false, fmt.Errorf("reading the catalog: %w", err)
	}
	if !left {
		return false, nil
	}
	var ours bool
	if err := in.conn.QueryRow(ctx, `select exists (select 1 from integration_outbox_owned_objects o
		where o.kind = 'constraint' and o.table_name = $1 and o.object_name = $2)`, outbox, statusCheck).Scan(&ours); err != nil {
		return false, fmt.Errorf("reading integration_outbox_owned_objects: %w", err)
	}
	if !ours {
		return false, nil
	}
	stmt := fmt.Sprintf("alter table %s drop constraint if exists %s", ident(outbox), ident(statusCheck))
	if err := in.brief(ctx, stmt, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `delete from integration_outbox_owned_objects
			where kind = 'constraint' and table_name = $1 and object_name = $2`, outbox, statusCheck)
		return err
	}); err != nil {
		return false, fmt.Errorf("dropping the unvalidated status check: %w", err)
	}
	return true, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
