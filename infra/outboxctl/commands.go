package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/inspect"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/report"
	"integration-outbox/internal/rerun"
	"integration-outbox/internal/routines"
	"integration-outbox/internal/schemacheck"
)

// maxListLimit bounds -limit.
const maxListLimit = 1000

var statuses = []string{string(outbox.StatusQueued), string(outbox.StatusProcessing), string(outbox.StatusCompleted),
	string(outbox.StatusFailed), string(outbox.StatusUncertain), string(outbox.StatusUnsupported), string(outbox.StatusDeadLetter)}

func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	return fs
}

// parse parses flags placed before or after the positional arguments
// ("show ID -org ORG") and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func checkUUID(flagName, v string, required bool) error {
	if v == "" {
		if required {
			return usagef("%s is required", flagName)
		}
		return nil
	}
	if !message.IsUUID(v) {
		return usagef("%s: must be a uuid, got %q", flagName, v)
	}
	return nil
}

func checkLimit(n int) error {
	if n < 1 || n > maxListLimit {
		return usagef("-limit: must be from 1 to %d, got %d", maxListLimit, n)
	}
	return nil
}

func (c *cli) list(ctx context.Context, args []string) error {
	fs := c.flags("list")
	org := fs.String("org", "", "only this organization's rows")
	status := fs.String("status", "", "only rows in this status ("+strings.Join(statuses, ", ")+")")
	conn := fs.String("connection", "", "only rows of this integration connection")
	limit := fs.Int("limit", 50, "at most this many rows, newest first")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := errors.Join(checkUUID("-org", *org, false), checkUUID("-connection", *conn, false),
		checkLimit(*limit)); err != nil {
		return usagef("%s", err)
	}
	if *status != "" && !slices.Contains(statuses, *status) {
		return usagef("-status: must be one of %s, got %q", strings.Join(statuses, ", "), *status)
	}
	a, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	rows, more, err := a.Report().List(ctx, report.ListParams{OrganizationID: *org, Status: *status,
		ConnectionID: *conn, Limit: *limit})
	if err != nil {
		return err
	}
	printRows(c.stdout, rows)
	if more {
		fmt.Fprintf(c.stdout, "(more rows match: raise -limit, at most %d)\n", maxListLimit)
	}
	return nil
}

// oneRow parses the arguments of a command on one row of one organization
// ("show ID -org ORG"): the id and the organization, lower-cased.
func (c *cli) oneRow(name string, args []string) (id, org string, err error) {
	fs := c.flags(name)
	orgFlag := fs.String("org", "", "the row's organization (required)")
	pos, err := parse(fs, args)
	if err != nil {
		return "", "", err
	}
	if len(pos) != 1 {
		return "", "", usagef("%s takes one outbox id", name)
	}
	if err := errors.Join(checkUUID("outbox id", pos[0], true), checkUUID("-org", *orgFlag, true)); err != nil {
		return "", "", usagef("%s", err)
	}
	return strings.ToLower(pos[0]), strings.ToLower(*orgFlag), nil
}

func (c *cli) show(ctx context.Context, args []string) error {
	id, org, err := c.oneRow("show", args)
	if err != nil {
		return err
	}
	a, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	d, err := a.Report().Show(ctx, org, id)
	if errors.Is(err, report.ErrNotFound) {
		return fmt.Errorf("outbox row %s not found for organization %s", id, org)
	}
	if err != nil {
		return err
	}
	printDetail(c.stdout, d)
	return nil
}

// preview prints, as the inspect function's "preview" answers it, the
// request the push of the row would send now, or its refusal: no provider
// call, no secret read, no write.
func (c *cli) preview(ctx context.Context, args []string) error {
	id, org, err := c.oneRow("preview", args)
	if err != nil {
		return err
	}
	a, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	resp, err := a.Inspector().Run(ctx, inspect.Request{OrganizationID: org, OutboxID: id, Preview: true})
	if err != nil {
		return err
	}
	if !resp.Found {
		return fmt.Errorf("outbox row %s not found for organization %s", id, org)
	}
	out, err := json.MarshalIndent(resp.Preview, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the preview: %w", err)
	}
	fmt.Fprintf(c.stdout, "%s\n", out)
	return nil
}

func (c *cli) rerun(ctx context.Context, args []string) error {
	fs := c.flags("rerun")
	file := fs.String("f", "", "the rerun payload (JSON); stdin when absent or -")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (the payload goes in -f or on stdin)", pos[0])
	}
	var raw []byte
	if *file == "" || *file == "-" {
		raw, err = io.ReadAll(io.LimitReader(c.stdin, 1<<20))
	} else {
		raw, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("reading the payload: %w", err)
	}
	// Reject a bad payload before connecting anywhere.
	req, err := rerun.Parse(raw)
	if err != nil {
		return err
	}
	a, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Rerunner(a.SQS())
	if err != nil {
		return err
	}
	res, runErr := r.Run(ctx, req)
	if runErr != nil && res.Requeued == nil {
		return runErr // nothing was done
	}
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the result: %w", err)
	}
	fmt.Fprintf(c.stdout, "%s\n", out)
	return runErr
}

func (c *cli) stuck(ctx context.Context, args []string) error {
	fs := c.flags("stuck")
	org := fs.String("org", "", "only this organization's rows")
	accepted := fs.Duration("accepted-for", time.Hour, "show accepted rows waiting on their provider longer than this")
	overdue := fs.Duration("overdue-for", 5*time.Minute, "show queued rows due for longer than this")
	limit := fs.Int("limit", 50, "at most this many rows per section")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := errors.Join(checkUUID("-org", *org, false), checkLimit(*limit)); err != nil {
		return usagef("%s", err)
	}
	if *accepted <= 0 || *overdue <= 0 {
		return usagef("-accepted-for and -overdue-for must be positive")
	}
	a, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	s, err := a.Report().Stuck(ctx, report.StuckParams{OrganizationID: *org, AcceptedFor: *accepted,
		OverdueFor: *overdue, Limit: *limit})
	if err != nil {
		return err
	}
	printStuck(c.stdout, s, *accepted, *overdue)
	return nil
}

// check runs the schema check: the host's tables against what the worker
// needs, every statement of the functions prepared and planned, all rolled
// back. It prints each problem and fails when there is one.
func (c *cli) check(ctx context.Context, args []string) error {
	fs := c.flags("check")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	a, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	conn, err := a.Pool.Acquire(ctx)
	if err != nil {
		if strings.Contains(err.Error(), "unsupported startup parameter") {
			return fmt.Errorf("connecting: %w (a pooler refuses the startup parameters a DATABASE_URL's search_path or options become: "+
				"remove them from the URL and give the functions' role its search_path instead: alter role … set search_path = …)", err)
		}
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Release()
	r, err := schemacheck.Run(ctx, conn.Conn())
	if err != nil {
		return err
	}
	for _, p := range r.Tables {
		fmt.Fprintf(c.stdout, "table  %s\n", p)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(c.stdout, "statement  %s\n", f)
	}
	for _, p := range r.Routines {
		fmt.Fprintf(c.stdout, "routine  %s\n", p)
	}
	connProblems, err := checkConnection(ctx, a.Pool.Config().ConnConfig, c.stdout)
	if err != nil {
		return err
	}
	if n := len(r.Tables) + len(r.Failures) + len(r.Routines) + connProblems; n > 0 {
		return fmt.Errorf("%d problem(s) found; nothing was changed", n)
	}
	fmt.Fprintf(c.stdout, "ok: the host's tables have what the worker needs, all %d statements prepare, and %d statements run through their routines\n",
		r.Checked, len(routines.All()))
	return nil
}

// checkConnection says how the functions reach PostgreSQL with cfg (the
// pool's configuration from DATABASE_URL) and counts what would fail there:
// named prepared statements (default_query_exec_mode=cache_statement in the
// URL) behind a transaction pooler, which drops them between transactions
// (PgBouncer) or pins every session (RDS Proxy).
func checkConnection(ctx context.Context, cfg *pgx.ConnConfig, out io.Writer) (int, error) {
	pooled, err := pgtx.TransactionPooled(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("checking the connection: %w", err)
	}
	named := pgtx.NamedStatements(cfg)
	switch {
	case pooled && named:
		fmt.Fprintln(out, "connection  DATABASE_URL reaches PostgreSQL through a transaction pooler, and its default_query_exec_mode=cache_statement "+
			"sends named prepared statements, which the pooler drops between transactions (PgBouncer) or pins every session for (RDS Proxy): "+
			"remove default_query_exec_mode from DATABASE_URL")
		return 1, nil
	case pooled:
		fmt.Fprintln(out, "connection: through a transaction pooler (server connections change between transactions); statements unnamed: works")
	default:
		fmt.Fprintln(out, "connection: direct or session-pooled (one server connection a session)")
	}
	return 0, nil
}
