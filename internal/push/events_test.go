package push_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/event"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// TestADeadLetterIsPublishedByThePushThatWroteIt: a command the receiver
// rejects (422) ends in dead_letter, and its Command Dead-Lettered event
// reaches the bus when the push function's batch returns, without any
// dispatch run. The test logs the delay from the dead letter (the event's
// occurredAt, the record's time) to the event's arrival at the bus's
// target queue (SentTimestamp).
func TestADeadLetterIsPublishedByThePushThatWroteIt(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	bus := testenv.NewEventBus(t, moto, event.Source)
	pub, err := event.NewPublisher(f.Pool, bus.Client, event.Config{BusName: bus.Name})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := credential.NewResolver(secretsmanager.NewFromConfig(moto.AWSConfig()),
		credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	h := outbox.DefaultHealth()
	h.Events = true
	store := outbox.NewStore(f.Pool).WithHealth(h)
	w, err := push.New(store, resolver, purchaseorder.NewCommand(f.Pool), push.Config{
		Logger:    slog.New(slog.DiscardHandler),
		Providers: provider.NewRegistry(provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true, Timeout: 2 * time.Second})),
		Jitter:    func() float64 { return 0 }, Events: pub,
	})
	if err != nil {
		t.Fatal(err)
	}
	rc := testenv.NewReceiver(t, testenv.Reply(http.StatusUnprocessableEntity, `{"error":"supplier unknown"}`))
	ref := secret(t, `{"token":"webhook-token"}`, org)
	ids := f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{
		Connection: testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook", CredentialReference: ref,
			Config: map[string]string{"url": rc.URL + "/orders"}}})
	b := bundle{f: f, store: store, worker: w, org: org}
	b.handle(t, b.claim(t, 10))
	if r := f.Row(t, ids.CommandID); r.Status != "dead_letter" {
		t.Fatalf("row is %s, want dead_letter", r.Status)
	}

	// No dispatch run: what the push published is all there is.
	res, err := bus.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(bus.QueueURL),
		MaxNumberOfMessages: 10, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"SentTimestamp"}})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range res.Messages {
		var e struct {
			DetailType string `json:"detail-type"`
			Detail     struct {
				OutboxID   string `json:"outboxId"`
				OccurredAt string `json:"occurredAt"`
			} `json:"detail"`
		}
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &e); err != nil {
			t.Fatal(err)
		}
		if e.DetailType != event.CommandDeadLettered || e.Detail.OutboxID != ids.CommandID {
			continue
		}
		found = true
		occurred, err := time.Parse(time.RFC3339Nano, e.Detail.OccurredAt)
		sent, err2 := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
		if err == nil && err2 == nil {
			t.Logf("dead letter at %s, its event at the bus's target %s later", occurred.Format(time.RFC3339Nano),
				time.UnixMilli(sent).Sub(occurred))
		}
	}
	if !found {
		t.Fatalf("no Command Dead-Lettered for %s on the bus after the push, before any dispatch run (%d other messages)",
			ids.CommandID, len(res.Messages))
	}
}
