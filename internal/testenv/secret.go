package testenv

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// OrganizationTag is the tag that ties a secret to its tenant; it must
// equal credential.OrganizationTag (testenv cannot import credential, whose
// own tests use testenv).
const OrganizationTag = "organization_id"

// SecretCreator is the Secrets Manager call CreateSecret makes.
type SecretCreator interface {
	CreateSecret(ctx context.Context, in *secretsmanager.CreateSecretInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.CreateSecretOutput, error)
}

// CreateSecret creates the secret name holding value on api (a client of a
// moto_server), tagged for organization org unless org is "", and returns
// its name and ARN. The test fails if Secrets Manager refuses it.
func CreateSecret(t testing.TB, api SecretCreator, name, value, org string) (string, string) {
	t.Helper()
	in := &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)}
	if org != "" {
		in.Tags = []types.Tag{{Key: aws.String(OrganizationTag), Value: aws.String(org)}}
	}
	out, err := api.CreateSecret(context.Background(), in)
	if err != nil {
		t.Fatalf("creating secret %s: %v", name, err)
	}
	return name, aws.ToString(out.ARN)
}

// SecretName returns a fresh secret name under integrations/ naming the test
// (and suffix, "-foreign" say): moto_server lives as long as the test binary (or longer, with
// TEST_AWS_ENDPOINT_URL), so names must not repeat across -count runs.
func SecretName(t testing.TB, suffix string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/_-", r) {
			return r
		}
		return '-'
	}, t.Name()+suffix)
	return "integrations/" + name + "-" + rand.Text()[:8]
}
