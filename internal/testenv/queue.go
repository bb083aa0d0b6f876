package testenv

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// QueueCreator is the SQS call CreateQueue makes.
type QueueCreator interface {
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, optFns ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
}

// CreateQueue creates a fresh SQS queue on api (a client of a moto_server)
// with the given attributes (VisibilityTimeout, say; nil for none) and
// returns its URL. The name is random: a moto_server may outlive the test
// binary (TEST_AWS_ENDPOINT_URL).
func CreateQueue(t testing.TB, api QueueCreator, attributes map[string]string) string {
	t.Helper()
	name := "test-" + rand.Text()
	out, err := api.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attributes})
	if err != nil {
		t.Fatalf("creating queue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}
