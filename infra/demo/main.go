// Command demo runs the main job on this machine from nothing (make demo): a
// throwaway PostgreSQL and moto_server (reused when DATABASE_URL /
// AWS_ENDPOINT_URL are set), migrations, the two command queues and secrets,
// sample tenants, suppliers and purchase orders, then dispatch runs (as the
// schedule would start them) while the real push handlers drain both
// queues, and a summary of what happened.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/app"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/migrate"
	"integration-outbox/internal/opsaws"
	"integration-outbox/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	started := time.Now()

	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		fmt.Println("· starting a throwaway PostgreSQL cluster")
		pg, err := testenv.StartPostgres()
		if err != nil {
			return err
		}
		defer pg.Stop()
		if dbURL, err = pg.CreateDatabase(ctx, ""); err != nil {
			return err
		}
	}
	endpoint := os.Getenv("AWS_ENDPOINT_URL")
	if endpoint == "" {
		fmt.Println("· starting moto_server (SQS + Secrets Manager)")
		m, err := testenv.StartMoto()
		if err != nil {
			return err
		}
		defer m.Stop()
		endpoint = m.URL
		setDefault("AWS_ACCESS_KEY_ID", "test")
		setDefault("AWS_SECRET_ACCESS_KEY", "test")
	}
	os.Setenv("AWS_ENDPOINT_URL", endpoint)
	setDefault("AWS_REGION", "us-east-1")
	setDefault("AWS_ACCESS_KEY_ID", "test")
	setDefault("AWS_SECRET_ACCESS_KEY", "test")

	fmt.Println("· applying migrations")
	if err := migrate.Up(ctx, dbURL); err != nil {
		return err
	}

	recv, err := startReceiver()
	if err != nil {
		return err
	}
	defer recv.close()
	xero, err := testenv.StartXeroStandIn(demoXeroTenant, demoXeroAccessToken)
	if err != nil {
		return err
	}
	defer xero.Close()

	logPath := filepath.Join(os.TempDir(), "integration-outbox-demo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()

	env := map[string]string{
		"DATABASE_URL": dbURL, "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "SANDBOX_PROVIDER_ENABLED": "true", "LOG_LEVEL": "info",
		"CLAIM_BATCH_SIZE": "10", "PROVIDER_TIMEOUT": "5s",
	}
	pre, err := app.NewWithAWS(ctx, lookup(env), io.Discard, 0, opsaws.Load)
	if err != nil {
		return err
	}
	queueURL, err := createQueue(ctx, sqs.NewFromConfig(pre.AWS), "push-purchase-order")
	if err != nil {
		return err
	}
	supplierQueueURL, err := createQueue(ctx, sqs.NewFromConfig(pre.AWS), "push-supplier")
	if err != nil {
		return err
	}
	pre.Close()
	env["PUSH_PURCHASE_ORDER_QUEUE_URL"], env["PUSH_SUPPLIER_QUEUE_URL"] = queueURL, supplierQueueURL
	a, err := app.NewWithAWS(ctx, lookup(env), logFile, 0, opsaws.Load)
	if err != nil {
		return err
	}
	defer a.Close()

	fmt.Println("· seeding four organizations with purchase orders (and umbrella's suppliers)")
	orgs, err := seed(ctx, a.Pool, secretsmanager.NewFromConfig(a.AWS), recv.url, xero.URL)
	if err != nil {
		return err
	}

	dispatcher, err := a.Dispatcher(a.SQS())
	if err != nil {
		return err
	}
	orders, err := a.PushWorker()
	if err != nil {
		return err
	}
	suppliers, err := a.PushSupplierWorker()
	if err != nil {
		return err
	}
	queues := []queue{{"push-supplier", supplierQueueURL, suppliers.Handle}, {"push-purchase-order", queueURL, orders.Handle}}
	// Dispatch runs as the schedule starts them, each while the push
	// functions drain their queues, as Lambda's SQS event sources would: a
	// run that sent a command with another command of the same order
	// behind it waits for its result and sends the next one (per-entity
	// order); an order that waited for its supplier's push goes in the run
	// after that push (or in the same run, when the push ended first).
	for run := 1; run <= 3; run++ {
		summary, d, err := dispatchAndDrain(ctx, dispatcher, sqs.NewFromConfig(a.AWS), queues)
		if err != nil {
			return err
		}
		out, _ := json.Marshal(summary)
		fmt.Printf("· dispatch run %d → %s\n", run, out)
		for _, q := range queues {
			fmt.Printf("  %s drained its queue meanwhile: %d SQS batches, %d batch item failures\n", q.function, d[q.function].batches, d[q.function].failures)
		}
		if summary.Claimed == 0 {
			break
		}
	}
	fmt.Println()

	if err := report(ctx, a.Pool, orgs, recv, xero); err != nil {
		return err
	}
	fmt.Printf("\nJSON logs of the handlers: %s\nDone in %s.\n", logPath, time.Since(started).Round(100*time.Millisecond))
	return nil
}

func setDefault(k, v string) {
	if os.Getenv(k) == "" {
		os.Setenv(k, v)
	}
}

func lookup(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
}

// queue is a command queue and the push handler that consumes it.
type queue struct {
	function, url string
	handle        func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
}

// drained is what draining a queue did.
type drained struct {
	batches, failures int
}

// dispatchAndDrain runs dispatch once while the queues are drained, then
// drains what it sent at its end.
func dispatchAndDrain(ctx context.Context, dispatcher *dispatch.Dispatcher, client *sqs.Client,
	queues []queue) (dispatch.Summary, map[string]drained, error) {
	dispatching := make(chan struct{})
	type result struct {
		d   map[string]drained
		err error
	}
	done := make(chan result, 1)
	go func() {
		d := map[string]drained{}
		pass := func() error {
			for _, q := range queues {
				b, f, err := drain(ctx, client, q.url, q.handle)
				d[q.function] = drained{d[q.function].batches + b, d[q.function].failures + f}
				if err != nil {
					return err
				}
			}
			return nil
		}
		for {
			if err := pass(); err != nil {
				done <- result{d, err}
				return
			}
			select {
			case <-dispatching:
				err := pass() // what dispatch sent at its end
				done <- result{d, err}
				return
			default:
			}
		}
	}()
	summary, err := dispatcher.Handle(ctx, json.RawMessage(`{}`))
	close(dispatching)
	r := <-done
	if err != nil {
		return summary, nil, fmt.Errorf("dispatch: %w", err)
	}
	return summary, r.d, r.err
}

func createQueue(ctx context.Context, client *sqs.Client, function string) (string, error) {
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("integration-outbox-demo-" + function),
		Attributes: map[string]string{"VisibilityTimeout": "30"},
	})
	if err != nil {
		return "", fmt.Errorf("creating the demo queue: %w", err)
	}
	url := aws.ToString(out.QueueUrl)
	if _, err := client.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		return "", fmt.Errorf("purging the demo queue: %w", err)
	}
	return url, nil
}

// drain receives until the queue is empty, hands each batch to the push
// handler as Lambda's SQS event source would, and deletes what it acknowledged.
func drain(ctx context.Context, client *sqs.Client, queueURL string,
	handle func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) (batches, failures int, err error) {
	for empty := 0; empty < 2; {
		resp, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return batches, failures, fmt.Errorf("receiving: %w", err)
		}
		if len(resp.Messages) == 0 {
			empty++
			continue
		}
		var ev events.SQSEvent
		for _, m := range resp.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId),
				ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body), EventSource: "aws:sqs"})
		}
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := handle(hctx, ev)
		cancel()
		if err != nil {
			return batches, failures, fmt.Errorf("push handler: %w", err)
		}
		batches++
		failures += len(out.BatchItemFailures)
		failed := map[string]bool{}
		for _, f := range out.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		for _, r := range ev.Records {
			if !failed[r.MessageId] {
				client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: aws.String(r.ReceiptHandle)})
			}
		}
	}
	return batches, failures, nil
}

// receiver is the local webhook endpoint of the demo's supplier ERP: it
// accepts orders, rejects supplier SUP-REJECT (422) and is "down" (503) for
// SUP-FLAKY.
type receiver struct {
	url    string
	srv    *http.Server
	mu     sync.Mutex
	counts map[string]int
	signed int
}

func startReceiver() (*receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + l.Addr().String() + "/orders", counts: map[string]int{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(l)
	return r, nil
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	var body struct {
		ExternalSupplierID string `json:"externalSupplierId"`
		IdempotencyKey     string `json:"idempotencyKey"`
	}
	json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&body)
	status, resp := http.StatusCreated, fmt.Sprintf(`{"id":"ERP-%s"}`, strings.TrimPrefix(body.IdempotencyKey, "demo-")[:8])
	switch body.ExternalSupplierID {
	case "SUP-REJECT":
		status, resp = http.StatusUnprocessableEntity, `{"error":"supplier SUP-REJECT is not onboarded"}`
	case "SUP-FLAKY":
		status, resp = http.StatusServiceUnavailable, `{"error":"maintenance"}`
		w.Header().Set("Retry-After", "90")
	}
	r.mu.Lock()
	r.counts[fmt.Sprintf("%d %s", status, http.StatusText(status))]++
	if strings.Contains(req.Header.Get("X-Outbox-Signature"), "v1=") && strings.HasPrefix(req.Header.Get("Authorization"), "Bearer ") {
		r.signed++
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, resp)
}

func (r *receiver) close() { r.srv.Close() }

const (
	demoXeroTenant      = "4a3c1f0e-7b2d-4c5e-9f8a-1b2c3d4e5f60"
	demoXeroAccessToken = "demo-xero-access-token"
)

type org struct {
	name string
	id   string
}

// seed writes four tenants: Acme pushes to the webhook receiver with a
// signed, tagged secret (orders that succeed, one rejected, one failing);
// Globex uses the sandbox provider (one answer "accepted"); Initech has a
// location-scoped connection and one command type nobody handles; Umbrella
// pushes to Xero (the local stand-in) with an OAuth2 secret, one order twice
// (the second push updates the purchase order the first created).
func seed(ctx context.Context, pool *pgxpool.Pool, sm *secretsmanager.Client, webhookURL, xeroURL string) ([]org, error) {
	var orgs []org
	for _, name := range []string{"acme", "globex", "initech", "umbrella"} {
		var id string
		if err := pool.QueryRow(ctx, `select gen_random_uuid()::text`).Scan(&id); err != nil {
			return nil, err
		}
		orgs = append(orgs, org{name: name, id: id})
	}
	acme, globex, initech, umbrella := orgs[0].id, orgs[1].id, orgs[2].id, orgs[3].id
	secretName := "integrations/demo/acme-erp-" + acme[:8]
	_, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name:         aws.String(secretName),
		SecretString: aws.String(`{"token":"demo-token-acme","signingSecret":"demo-signing-acme"}`),
		Tags:         []smtypes.Tag{{Key: aws.String("organization_id"), Value: aws.String(acme)}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the demo secret: %w", err)
	}
	xeroSecret := "integrations/demo/umbrella-xero-" + umbrella[:8]
	oauth, _ := json.Marshal(map[string]string{"clientId": "demo-client", "clientSecret": "demo-client-secret",
		"refreshToken": "demo-refresh-token", "accessToken": demoXeroAccessToken,
		"accessTokenExpiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if _, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name:         aws.String(xeroSecret),
		SecretString: aws.String(string(oauth)),
		Tags:         []smtypes.Tag{{Key: aws.String("organization_id"), Value: aws.String(umbrella)}},
	}); err != nil {
		return nil, fmt.Errorf("creating the demo Xero secret: %w", err)
	}
	location := newID(ctx, pool)
	otherLocation := newID(ctx, pool)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	conn := func(orgID, loc, provider, ref string, cfg any) string {
		b, _ := json.Marshal(cfg)
		var id string
		if err == nil {
			err = tx.QueryRow(ctx, `insert into integration_connections (organization_id, location_id, provider, credential_reference, config_json)
				values ($1, nullif($2, '')::uuid, $3, nullif($4, ''), $5) returning id::text`, orgID, loc, provider, ref, b).Scan(&id)
		}
		return id
	}
	order := func(orgID, loc string, lines int) string {
		var id string
		if err == nil {
			err = tx.QueryRow(ctx, `insert into purchase_orders (organization_id, location_id, order_number, status, currency_code)
				values ($1, nullif($2, '')::uuid, 'PO-' || substr(md5(random()::text), 1, 6), 'approved', 'EUR') returning id::text`,
				orgID, loc).Scan(&id)
		}
		for i := range lines {
			if err == nil {
				_, err = tx.Exec(ctx, `insert into purchase_order_lines (purchase_order_id, stock_item_id, ordered_quantity,
					purchase_unit_code, normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot, created_at)
					values ($1, gen_random_uuid(), $2::int, 'case', 'each', 12, 1850 + $2::int, now() + make_interval(secs => $2::int))`, id, i+1)
			}
		}
		return id
	}
	enqueue := func(orgID, connID, provider, commandType, entityType, entityID string, payload any) {
		b, _ := json.Marshal(payload)
		if err == nil {
			_, err = tx.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id, provider,
				command_type, local_entity_type, local_entity_id, payload_json, idempotency_key)
				values ($1, $2, $3, $4, $5, $6, $7, 'demo-' || gen_random_uuid())`,
				orgID, connID, provider, commandType, entityType, entityID, b)
		}
	}
	command := func(orgID, connID, provider, commandType, poID, supplier string) {
		enqueue(orgID, connID, provider, commandType, "purchase_order", poID, map[string]string{"externalSupplierId": supplier})
	}
	acmeConn := conn(acme, "", "webhook", secretName, map[string]string{"url": webhookURL})
	for range 4 {
		command(acme, acmeConn, "webhook", "push_purchase_order", order(acme, "", 3), "SUP-100")
	}
	command(acme, acmeConn, "webhook", "push_purchase_order", order(acme, "", 1), "SUP-REJECT")
	command(acme, acmeConn, "webhook", "push_purchase_order", order(acme, "", 2), "SUP-FLAKY")

	globexConn := conn(globex, "", "sandbox", "", map[string]any{"latencyMs": 20})
	for range 5 {
		command(globex, globexConn, "sandbox", "push_purchase_order", order(globex, "", 2), "SUP-200")
	}
	slowConn := conn(globex, "", "sandbox", "", map[string]any{"answer": "accepted"})
	command(globex, slowConn, "sandbox", "push_purchase_order", order(globex, "", 1), "SUP-201")

	initechConn := conn(initech, location, "webhook", "", map[string]string{"url": webhookURL})
	command(initech, initechConn, "webhook", "push_purchase_order", order(initech, location, 2), "SUP-300")
	command(initech, initechConn, "webhook", "push_purchase_order", order(initech, otherLocation, 2), "SUP-300")
	command(initech, initechConn, "webhook", "push_invoice", order(initech, location, 1), "SUP-300")
	xeroConn := conn(umbrella, "", "xero", xeroSecret, map[string]string{"tenantId": demoXeroTenant, "accountCode": "300",
		"apiBaseUrl": xeroURL + "/api.xro/2.0", "tokenUrl": xeroURL + "/connect/token"})
	// Umbrella's back office has just connected Xero: its two suppliers
	// are pushed first (Xero contacts), and its orders name the host's
	// supplier (payload supplierId), not a Xero ContactID: each waits for
	// its supplier's push, no attempt used, then goes to that contact.
	pushSupplier := func(name, code string) string {
		id := newID(ctx, pool)
		enqueue(umbrella, xeroConn, "xero", "push_supplier", "supplier", id, map[string]any{"name": name, "code": code,
			"email": "orders@" + strings.ToLower(strings.Fields(name)[0]) + ".example", "currencyCode": "EUR",
			"addressLines": []string{"1 Harbour Road"}, "city": "Dublin", "country": "IE"})
		return id
	}
	supplierOrder := func(poID, supplier string) {
		enqueue(umbrella, xeroConn, "xero", "push_purchase_order", "purchase_order", poID, map[string]string{"supplierId": supplier})
	}
	fresh, harbour := pushSupplier("Fresh Produce Ltd", "SUP-FRESH"), pushSupplier("Harbour Fish Co", "SUP-HARBOUR")
	twice := order(umbrella, "", 2)
	supplierOrder(twice, fresh)
	supplierOrder(order(umbrella, "", 3), harbour)
	supplierOrder(twice, fresh)                             // amended: updates the first
	supplierOrder(order(umbrella, "", 1), newID(ctx, pool)) // a supplier nobody pushed: refused, naming it
	command(umbrella, xeroConn, "xero", "push_purchase_order", order(umbrella, "", 1), "SUP-NOT-A-GUID")
	if err != nil {
		return nil, fmt.Errorf("seeding: %w", err)
	}
	return orgs, tx.Commit(ctx)
}

func newID(ctx context.Context, pool *pgxpool.Pool) string {
	var id string
	pool.QueryRow(ctx, `select gen_random_uuid()::text`).Scan(&id)
	return id
}

func report(ctx context.Context, pool *pgxpool.Pool, orgs []org, recv *receiver, xero *testenv.XeroStandIn) error {
	names := map[string]string{}
	var ids []string
	for _, o := range orgs {
		names[o.id] = o.name
		ids = append(ids, o.id)
	}
	rows, err := pool.Query(ctx, `
		select o.organization_id::text, o.status, o.attempt_count, coalesce(o.provider_status, ''),
			coalesce(o.provider_reference, ''), coalesce(o.command_type, ''),
			coalesce(extract(epoch from o.next_attempt_at - now())::int::text || 's', ''),
			coalesce(c.conflict_type, ''), coalesce(left(o.last_error, 70), '')
		from external_integration_outbox o
		left join external_integration_conflicts c on c.outbox_id = o.id and c.status = 'open'
		where o.organization_id = any($1::uuid[])
		order by o.organization_id, o.status, o.created_at`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORG\tSTATUS\tATTEMPTS\tPROVIDER STATUS\tREFERENCE\tCOMMAND\tRETRY IN\tCONFLICT\tLAST ERROR")
	byStatus := map[string]int{}
	for rows.Next() {
		var org, status, provStatus, ref, cmd, retry, conflict, lastErr string
		var attempts int
		if err := rows.Scan(&org, &status, &attempts, &provStatus, &ref, &cmd, &retry, &conflict, &lastErr); err != nil {
			return err
		}
		byStatus[status]++
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", names[org], status, attempts, provStatus, ref, cmd, retry, conflict, lastErr)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	tw.Flush()

	fmt.Println("\nRows per status:")
	var statuses []string
	for s := range byStatus {
		statuses = append(statuses, s)
	}
	sort.Strings(statuses)
	for _, s := range statuses {
		fmt.Printf("  %-12s %d\n", s, byStatus[s])
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	fmt.Println("\nRequests the local webhook receiver got:")
	var answers []string
	total := 0
	for a, n := range recv.counts {
		answers = append(answers, a)
		total += n
	}
	sort.Strings(answers)
	for _, a := range answers {
		fmt.Printf("  %-28s %d\n", a, recv.counts[a])
	}
	fmt.Printf("  %-28s %d (bearer token + X-Outbox-Signature)\n", "signed", recv.signed)
	fmt.Printf("  %-28s %d\n", "total", total)

	fmt.Println("\nRequests the LOCAL STAND-IN of Xero's API got (umbrella; not Xero):")
	counts := xero.Counts()
	answers = answers[:0]
	for a := range counts {
		answers = append(answers, a)
	}
	sort.Strings(answers)
	for _, a := range answers {
		fmt.Printf("  %-28s %d\n", a, counts[a])
	}
	fmt.Println("\nIts purchase orders, each with the contact a push_supplier created:")
	contacts := map[string]string{}
	for _, c := range xero.Contacts() {
		contacts[c.ContactID] = c.Name + " (" + c.ContactNumber + ")"
	}
	for _, o := range xero.Orders() {
		fmt.Printf("  %s  %d lines  → %s\n", o.Reference, o.Lines, contacts[o.ContactID])
	}
	return nil
}
