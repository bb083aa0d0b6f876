package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// poLoadArgs are one job of the po-load worker: the purchase order a push
// of the outbox would load, named as the push worker names it.
type poLoadArgs struct {
	OutboxID       string  `json:"outboxId"`
	OrganizationID string  `json:"organizationId"`
	OrderID        string  `json:"orderId"`
	LocationID     *string `json:"locationId,omitempty"`
	ConnectionID   string  `json:"connectionId"`
	Provider       string  `json:"provider"`
}

func (poLoadArgs) Kind() string { return "bench_po_load" }

// queryArgs are the load statement's arguments for this one job: the
// statement takes a batch as arrays (outbox ids, organization ids, order
// ids, location ids or null, connection ids, providers), here of one
// element each.
func (a poLoadArgs) queryArgs() pgx.NamedArgs {
	return pgx.NamedArgs{"outbox_ids": []string{a.OutboxID}, "organization_ids": []string{a.OrganizationID},
		"order_ids": []string{a.OrderID}, "location_ids": []*string{a.LocationID},
		"connection_ids": []string{a.ConnectionID}, "providers": []string{a.Provider}}
}

// errNotFound is a job whose purchase order the statement did not return.
var errNotFound = errors.New("purchase order not found")

// querier is what the worker needs of the pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// poLoadWorker runs the repository's purchase-order load statement for its
// job's order, as the push worker runs it for a batch, and fails the job
// when no row comes back. It decodes the row into Go values (rows.Values)
// but builds no provider document.
type poLoadWorker struct {
	river.WorkerDefaults[poLoadArgs]
	db  querier
	sql string
}

func (w *poLoadWorker) Work(ctx context.Context, job *river.Job[poLoadArgs]) error {
	rows, err := w.db.Query(ctx, w.sql, job.Args.queryArgs())
	if err != nil {
		return fmt.Errorf("loading purchase order %s: %w", job.Args.OrderID, err)
	}
	defer rows.Close()
	found := 0
	for rows.Next() {
		if _, err := rows.Values(); err != nil {
			return fmt.Errorf("reading purchase order %s: %w", job.Args.OrderID, err)
		}
		found++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("loading purchase order %s: %w", job.Args.OrderID, err)
	}
	if found == 0 {
		return fmt.Errorf("%w: %s of organization %s", errNotFound, job.Args.OrderID, job.Args.OrganizationID)
	}
	return nil
}

// readPOJobs reads the po-load jobs from path: one JSON object a line.
func readPOJobs(path string) ([]poLoadArgs, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the po-load jobs: %w", err)
	}
	defer f.Close()
	var out []poLoadArgs
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var a poLoadArgs
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return nil, fmt.Errorf("reading the po-load jobs, line %d: %w", len(out)+1, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the po-load jobs: %w", err)
	}
	return out, nil
}
