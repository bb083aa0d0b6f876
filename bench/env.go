package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/app"
	"integration-outbox/internal/config"
	"integration-outbox/internal/testenv"
)

// benchEnv is the run's throwaway servers.
type benchEnv struct {
	pg *testenv.Postgres
	// postmaster is the cluster's postmaster pid (0 when not found), for
	// its CPU time.
	postmaster int
	moto       *testenv.Moto
	queueURL   string
	sm         *secretsmanager.Client
}

// startEnv starts PostgreSQL and moto_server, points the AWS SDK of this
// process (and of the bootstraps it starts) at moto, and creates the command
// queue.
func startEnv(ctx context.Context, work string, settings []string) (*benchEnv, error) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		return nil, err
	}
	if len(settings) > 0 {
		pg.Settings = settings
		if err := pg.Restart(); err != nil {
			pg.Stop()
			return nil, fmt.Errorf("restarting PostgreSQL with %v: %w", settings, err)
		}
	}
	moto, err := testenv.StartMoto()
	if err != nil {
		pg.Stop()
		return nil, err
	}
	e := &benchEnv{pg: pg, moto: moto, postmaster: postmasterPID(pg.DataDir)}
	for k, v := range awsEnv(moto.URL) {
		os.Setenv(k, v)
	}
	cfg := moto.AWSConfig()
	out, err := sqs.NewFromConfig(cfg).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("push-purchase-order")})
	if err != nil {
		e.stop()
		return nil, fmt.Errorf("creating the command queue in moto: %w", err)
	}
	e.queueURL = aws.ToString(out.QueueUrl)
	e.sm = secretsmanager.NewFromConfig(cfg)
	return e, nil
}

func (e *benchEnv) stop() {
	e.moto.Stop()
	e.pg.Stop()
}

// awsEnv is what points an AWS SDK at moto.
func awsEnv(endpoint string) map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL":          endpoint,
		"AWS_REGION":                "us-east-1",
		"AWS_ACCESS_KEY_ID":         "test",
		"AWS_SECRET_ACCESS_KEY":     "test",
		"AWS_EC2_METADATA_DISABLED": "true",
	}
}

// functionEnv is the environment of a function: what the Lambda would get.
func (e *benchEnv) functionEnv(databaseURL string) map[string]string {
	env := awsEnv(e.moto.URL)
	env["DATABASE_URL"] = databaseURL
	env["PUSH_PURCHASE_ORDER_QUEUE_URL"] = e.queueURL
	env["WEBHOOK_ALLOW_PRIVATE_NETWORKS"] = "true"
	env["SANDBOX_PROVIDER_ENABLED"] = "true"
	return env
}

// newApp builds the composition root every function uses, on databaseURL,
// with the functions' own configuration defaults. Its logs are discarded.
func (e *benchEnv) newApp(ctx context.Context, databaseURL string) (*app.App, error) {
	env := e.functionEnv(databaseURL)
	env["LOG_LEVEL"] = "error"
	// These measurements are of the pipeline's raw speed (one dispatcher
	// running back to back, consumers draining at their own pace): the
	// in-flight caps would make them measure the caps. The overload
	// scenarios measure the caps.
	env["DISPATCH_MAX_IN_FLIGHT"] = "0"
	env["CONNECTION_MAX_IN_FLIGHT"] = "0"
	return app.New(ctx, func(k string) string { return env[k] }, io.Discard, config.NeedQueue)
}

// createSecret stores a credential secret tagged for organizationID.
func (e *benchEnv) createSecret(ctx context.Context, name, organizationID string) error {
	_, err := e.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name:         aws.String(name),
		SecretString: aws.String(`{"token":"bench-token","signingSecret":"bench-signing-secret"}`),
		Tags:         []smtypes.Tag{{Key: aws.String("organization_id"), Value: aws.String(organizationID)}},
	})
	if err != nil {
		return fmt.Errorf("creating secret %s: %w", name, err)
	}
	return nil
}

// admin runs f on a connection to the cluster's postgres database.
func (e *benchEnv) admin(ctx context.Context, f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, e.pg.URL)
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

// dropDatabase drops a database nobody uses any more, freeing its pages.
func (e *benchEnv) dropDatabase(ctx context.Context, url string) error {
	name := databaseName(url)
	return e.admin(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)")
		return err
	})
}

func databaseName(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return ""
	}
	return cfg.Database
}

// machine describes where the run happened.
type machine struct {
	CPUs      int
	CPUModel  string
	GoVersion string
	Kernel    string
	Load      string
}

func describeMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), CPUModel: "unknown", Load: loadAverage()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
