// Package enqueue is the Go example of docs/producers.md: a host service
// approves a purchase order and enqueues its push in the same transaction,
// then wakes the dispatcher.
package enqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Invoker is the one call of *lambda.Client the wake-up needs.
type Invoker interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, opts ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

// Approval is a purchase order the host approves and pushes to its supplier.
type Approval struct {
	OrganizationID     string
	ConnectionID       string
	PurchaseOrderID    string
	ExternalSupplierID string
}

// ApprovePurchaseOrder commits the approval and the outbox row together, then
// wakes the dispatch function (its ARN: the stack's DispatchFunctionArn output).
func ApprovePurchaseOrder(ctx context.Context, db *pgxpool.Pool, lambdaClient Invoker, dispatchFunctionARN string, a Approval) (string, error) {
	payload, err := json.Marshal(map[string]string{"externalSupplierId": a.ExternalSupplierID})
	if err != nil {
		return "", fmt.Errorf("encoding payload: %w", err)
	}
	var outboxID string
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `update purchase_orders set status = 'approved'
			where id = $1 and organization_id = $2`, a.PurchaseOrderID, a.OrganizationID); err != nil {
			return fmt.Errorf("approving purchase order: %w", err)
		}
		// The same key always names the same command: a retried request
		// returns the first row's id and enqueues nothing.
		err := tx.QueryRow(ctx, `select integration_outbox_enqueue($1, $2, $3, $4, $5, $6, $7)`,
			a.OrganizationID, a.ConnectionID, "push_purchase_order", "purchase_order", a.PurchaseOrderID,
			string(payload), "purchase-order-approved:"+a.PurchaseOrderID).Scan(&outboxID)
		if err != nil {
			return fmt.Errorf("enqueueing purchase order push: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	// After the commit, never before: a dispatcher woken earlier would not see
	// the row. Best effort: if the invoke fails, the schedule sends the row
	// within a minute.
	wake, _ := json.Marshal(map[string]string{"organizationId": a.OrganizationID})
	if _, err := lambdaClient.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(dispatchFunctionARN),
		InvocationType: types.InvocationTypeEvent, // asynchronous: returns once Lambda has queued the event
		Payload:        wake,
	}); err != nil {
		slog.WarnContext(ctx, "waking the dispatcher failed; the schedule will send the row",
			"outboxId", outboxID, "organizationId", a.OrganizationID, "error", err)
	}
	return outboxID, nil
}
