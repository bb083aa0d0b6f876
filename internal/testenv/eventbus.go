package testenv

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

type (
	sqsAttribute      = sqstypes.QueueAttributeName
	eventbridgeTarget = ebtypes.Target
)

// EventBus is an EventBridge bus on a moto_server with a rule that sends
// every event of a source to an SQS queue: what a host's rule would do.
type EventBus struct {
	Name     string
	Client   *eventbridge.Client
	SQS      *sqs.Client
	QueueURL string
}

// BusEvent is one delivered event, as EventBridge writes it to a target.
type BusEvent struct {
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Detail     json.RawMessage `json:"detail"`
}

// NewEventBus creates a bus with a random name on m, a queue, and a rule
// on the bus matching source whose target is the queue.
func NewEventBus(t testing.TB, m *Moto, source string) *EventBus {
	t.Helper()
	ctx := context.Background()
	cfg := m.AWSConfig()
	b := &EventBus{Name: "test-bus-" + rand.Text(), Client: eventbridge.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg)}
	// The name is random: "already exists" is the answer to the SDK's own
	// retry of a create whose first answer was slow on a loaded machine.
	var exists *ebtypes.ResourceAlreadyExistsException
	if _, err := b.Client.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(b.Name)}); err != nil && !errors.As(err, &exists) {
		t.Fatalf("creating event bus: %v", err)
	}
	b.QueueURL = CreateQueue(t, b.SQS, nil)
	attrs, err := b.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(b.QueueURL),
		AttributeNames: []sqsAttribute{"QueueArn"}})
	if err != nil {
		t.Fatalf("reading the queue's ARN: %v", err)
	}
	pattern, _ := json.Marshal(map[string][]string{"source": {source}})
	rule := "all-" + rand.Text()
	if _, err := b.Client.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(rule), EventBusName: aws.String(b.Name),
		EventPattern: aws.String(string(pattern))}); err != nil {
		t.Fatalf("creating the rule: %v", err)
	}
	if _, err := b.Client.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(rule), EventBusName: aws.String(b.Name),
		Targets: []eventbridgeTarget{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes["QueueArn"])}}}); err != nil {
		t.Fatalf("adding the queue as the rule's target: %v", err)
	}
	return b
}

// Drain receives every event waiting in the queue (until a receive comes
// back empty) and deletes them.
func (b *EventBus) Drain(t testing.TB) []BusEvent {
	t.Helper()
	ctx := context.Background()
	var out []BusEvent
	for {
		res, err := b.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(b.QueueURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 0})
		if err != nil {
			t.Fatalf("receiving events: %v", err)
		}
		if len(res.Messages) == 0 {
			return out
		}
		for _, m := range res.Messages {
			var e BusEvent
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &e); err != nil {
				t.Fatalf("an event that is not JSON: %v: %s", err, aws.ToString(m.Body))
			}
			out = append(out, e)
			if _, err := b.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(b.QueueURL),
				ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("deleting an event: %v", err)
			}
		}
	}
}
