// Package opsaws gives the operator tools (outboxctl, the demo) the AWS SDK's
// default configuration chain: environment, shared config and credentials
// files, named profiles (AWS_PROFILE), SSO, web identity, IMDS. Only
// binaries under infra/ import it; the Lambda bootstraps keep
// internal/app's environment-only configuration, which links none of those
// providers (infra/opstest checks that no function links them).
package opsaws

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Load builds the configuration through the default chain. Values getenv
// returns take precedence over the chain's own reading of the process
// environment, so a caller that passes its own environment (the demo's
// local stand-ins, a test) gets exactly that: AWS_REGION or
// AWS_DEFAULT_REGION, AWS_PROFILE, AWS_ENDPOINT_URL, and static
// credentials when AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are both set.
// requireRegion makes a missing region an error naming AWS_REGION.
func Load(ctx context.Context, getenv func(string) string, requireRegion bool) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	if p := getenv("AWS_PROFILE"); p != "" {
		opts = append(opts, config.WithSharedConfigProfile(p))
	}
	if id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(id, secret, getenv("AWS_SESSION_TOKEN"))))
	}
	if v := getenv("AWS_ENDPOINT_URL"); v != "" {
		opts = append(opts, config.WithBaseEndpoint(v))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("AWS configuration (default chain): %w", err)
	}
	if cfg.Region == "" && requireRegion {
		return aws.Config{}, errors.New("config: AWS_REGION is required (or a region in the AWS profile)")
	}
	return cfg, nil
}
