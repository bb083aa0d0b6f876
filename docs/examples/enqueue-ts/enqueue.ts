// The TypeScript example of docs/producers.md (node-postgres and the AWS SDK
// v3): approve a purchase order and enqueue its push in one transaction, then
// wake the dispatcher.
import type { Pool } from 'pg';
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';

export interface Approval {
  organizationId: string;
  connectionId: string;
  purchaseOrderId: string;
  externalSupplierId: string;
}

export async function approvePurchaseOrder(
  pool: Pool,
  lambda: Pick<LambdaClient, 'send'>,
  dispatchFunctionArn: string, // the stack's DispatchFunctionArn output
  a: Approval,
): Promise<string> {
  const client = await pool.connect();
  let outboxId: string;
  try {
    await client.query('BEGIN');
    await client.query(
      `update purchase_orders set status = 'approved'
       where id = $1 and organization_id = $2`,
      [a.purchaseOrderId, a.organizationId],
    );
    // The same key always names the same command: a retried request returns
    // the first row's id and enqueues nothing.
    const { rows } = await client.query<{ id: string }>(
      'select integration_outbox_enqueue($1, $2, $3, $4, $5, $6, $7) as id',
      [
        a.organizationId,
        a.connectionId,
        'push_purchase_order',
        'purchase_order',
        a.purchaseOrderId,
        JSON.stringify({ externalSupplierId: a.externalSupplierId }),
        `purchase-order-approved:${a.purchaseOrderId}`,
      ],
    );
    outboxId = rows[0].id;
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
  // After the commit, never before. Best effort: if the invoke fails, the
  // schedule sends the row within a minute.
  try {
    await lambda.send(
      new InvokeCommand({
        FunctionName: dispatchFunctionArn,
        InvocationType: 'Event', // asynchronous
        Payload: new TextEncoder().encode(JSON.stringify({ organizationId: a.organizationId })),
      }),
    );
  } catch (err) {
    console.warn('waking the dispatcher failed; the schedule will send the row', { outboxId, err });
  }
  return outboxId;
}
