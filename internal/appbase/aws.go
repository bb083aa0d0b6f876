package appbase

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// awsConfig builds the SDK configuration from the environment every Lambda
// function gets (AWS_REGION and the execution role's AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), plus AWS_ENDPOINT_URL for a local
// emulator. It stands in for config.LoadDefaultConfig, whose shared-config
// files and SSO, STS and IMDS providers no function uses but every bootstrap
// would link (about 1.6 MiB each). Run locally, export credentials into the
// environment (aws configure export-credentials --format env).
//
// requireRegion makes a missing AWS_REGION a start-up error; without it the
// region is only needed by whatever calls AWS (the credential resolver names
// the variable itself).
func awsConfig(getenv func(string) string, requireRegion bool) (aws.Config, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	if region == "" && requireRegion {
		return aws.Config{}, errors.New("config: AWS_REGION is required")
	}
	creds := aws.Credentials{
		AccessKeyID:     getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken:    getenv("AWS_SESSION_TOKEN"),
		Source:          "environment",
	}
	cfg := aws.Config{
		Region: region,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
				return aws.Credentials{}, fmt.Errorf("AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
			}
			return creds, nil
		}),
	}
	if v := getenv("AWS_ENDPOINT_URL"); v != "" {
		cfg.BaseEndpoint = aws.String(v)
	}
	return cfg, nil
}
