// Package appbase is what every function's container builds once, from
// the configuration: the logger, the database pool and the AWS SDK
// configuration (App), and the handlers of the functions that need nothing
// more (the dead-letter releaser, retention). internal/app builds the
// pipeline's handlers (dispatch, push, rerun, inspect) on it; the functions
// that need none of that link only this package (each bootstrap links what
// its package imports, and the pipeline's bring the providers, the
// credential resolver and EventBridge).
package appbase

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/config"
	"integration-outbox/internal/logging"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
)

// App holds what one container builds once.
type App struct {
	Config config.Config
	Logger *slog.Logger
	Pool   *pgxpool.Pool
	AWS    aws.Config
	// Out receives the JSON logs and the EMF metric lines (stdout in Lambda).
	Out io.Writer
}

// AWSLoader builds the AWS SDK configuration; requireRegion makes a missing
// region an error.
type AWSLoader func(ctx context.Context, getenv func(string) string, requireRegion bool) (aws.Config, error)

// New reads the configuration through getenv and connects: the database pool
// (sized for one invocation) and the AWS SDK config from the environment
// (AWS_ENDPOINT_URL and AWS_REGION point it at a local emulator). The Lambda
// functions use it.
func New(ctx context.Context, getenv func(string) string, logOut io.Writer, need config.Need) (*App, error) {
	return NewWithAWS(ctx, getenv, logOut, need, EnvironmentAWS)
}

// EnvironmentAWS is the Lambda functions' AWSLoader: the environment only.
func EnvironmentAWS(_ context.Context, getenv func(string) string, requireRegion bool) (aws.Config, error) {
	return awsConfig(getenv, requireRegion)
}

// NewWithAWS is New with another AWS configuration loader: the operator
// tools pass the SDK's default chain (internal/opsaws), so that named
// profiles and SSO work on a workstation.
func NewWithAWS(ctx context.Context, getenv func(string) string, logOut io.Writer, need config.Need, loadAWS AWSLoader) (*App, error) {
	cfg, err := config.Load(getenv, need)
	if err != nil {
		return nil, err
	}
	log := logging.New(logOut, cfg.LogLevel)
	awsCfg, err := loadAWS(ctx, getenv, need&config.NeedQueue != 0 || cfg.DatabaseSecretARN != "")
	if err != nil {
		return nil, err
	}
	if cfg.AWSRegion == "" {
		cfg.AWSRegion = awsCfg.Region
	}
	dbURL := cfg.DatabaseURL
	if cfg.DatabaseSecretARN != "" {
		if dbURL, err = databaseURLFromSecret(ctx, secretsmanager.NewFromConfig(awsCfg), cfg.DatabaseSecretARN, cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("config: DATABASE_URL: %w", redactURLError(err))
	}
	poolCfg.MaxConns = int32(cfg.DatabasePoolSize)
	pgtx.Configure(poolCfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("creating database pool: %w", err)
	}
	return &App{Config: cfg, Logger: log, Pool: pool, AWS: awsCfg, Out: logOut}, nil
}

// Close releases the pool.
func (a *App) Close() { a.Pool.Close() }

// Health is the connection health the outbox statements keep, from the
// configuration; events are recorded only with EVENT_BUS_NAME set.
func (a *App) Health() outbox.Health {
	return outbox.Health{Events: a.Config.EventBusName != "", FailingAfter: a.Config.ConnectionFailingAfter,
		DisableAfter: a.Config.ConnectionDisableAfter, DisableMinSpan: a.Config.ConnectionDisableMinSpan,
		CommandFailingAfterAttempts: a.Config.CommandFailingAfterAttempts}
}

// OutboxStore is the outbox store of every function that claims or
// records: one circuit breaker setting for both (CIRCUIT_FAILURE_THRESHOLD 0:
// no circuit state is read or written).
func (a *App) OutboxStore() *outbox.Store {
	return outbox.NewStore(a.Pool).WithCircuit(outbox.Circuit{
		FailureThreshold: a.Config.CircuitFailureThreshold, Cooldown: a.Config.CircuitCooldown}).WithHealth(a.Health()).
		WithMissingRoutines(func(statements []string) {
			a.Logger.Warn("statement routines missing: these statements run plain, planned at every call, until make migrate installs this build's routines (outboxctl check)",
				"statements", statements)
		})
}

// rdsSecret is the JSON of an RDS-managed database secret.
type rdsSecret struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	DBName   string `json:"dbname"`
}

// databaseURLFromSecret builds the database URL from an RDS secret. With an
// endpoint URL (DATABASE_URL without credentials) the secret only supplies
// username and password, as an RDS-managed master user secret does.
func databaseURLFromSecret(ctx context.Context, sm *secretsmanager.Client, arn, endpoint string) (string, error) {
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String("AWSCURRENT")})
	if err != nil {
		return "", fmt.Errorf("config: DATABASE_SECRET_ARN: reading the secret: %w", err)
	}
	var s rdsSecret
	if err := json.Unmarshal([]byte(aws.ToString(out.SecretString)), &s); err != nil {
		return "", fmt.Errorf("config: DATABASE_SECRET_ARN: the secret is not RDS secret JSON")
	}
	if s.Username == "" {
		return "", fmt.Errorf("config: DATABASE_SECRET_ARN: the secret has no username")
	}
	return databaseURL(s, endpoint)
}

func databaseURL(s rdsSecret, endpoint string) (string, error) {
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("config: DATABASE_URL: must be postgres://host:port/dbname when DATABASE_SECRET_ARN is set")
		}
		if _, has := u.User.Password(); has {
			return "", fmt.Errorf("config: DATABASE_URL: must not carry a password when DATABASE_SECRET_ARN is set")
		}
		u.User = url.UserPassword(s.Username, s.Password)
		return u.String(), nil
	}
	if s.Host == "" {
		return "", fmt.Errorf("config: DATABASE_SECRET_ARN: the secret has no host; set DATABASE_URL to postgres://host:5432/dbname (no credentials) to use it")
	}
	port := s.Port
	if port == 0 {
		port = 5432
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(s.Username, s.Password),
		Host: s.Host + ":" + strconv.Itoa(port), Path: "/" + s.DBName, RawQuery: "sslmode=require"}
	return u.String(), nil
}

// redactURLError keeps a password in a malformed DATABASE_URL out of logs.
func redactURLError(err error) error {
	return fmt.Errorf("malformed connection string (%T)", err)
}
