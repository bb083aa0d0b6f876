// Package app is the composition root: it builds the handlers of every
// function from the configuration, once per container. functions/*/main.go,
// the demo and the benchmarks all assemble the pipeline through it.
package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/config"
	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/event"
	"integration-outbox/internal/health"
	"integration-outbox/internal/logging"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/supplier"
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

// Routes is the command → queue routing table. Where
// PUSH_SUPPLIER_QUEUE_URL is not set, push_supplier's route is empty: its
// rows are held, not ended, until it is (dispatch.HeldRecheck).
func (a *App) Routes() dispatch.Routes {
	return dispatch.Routes{purchaseorder.CommandType: a.Config.PushPurchaseOrderQueueURL,
		supplier.CommandType: a.Config.PushSupplierQueueURL}
}

// DispatchRoomWait is how long a dispatch run waits for rows in flight to
// finish when an in-flight cap holds due rows back, before it claims again.
const DispatchRoomWait = 250 * time.Millisecond

// SQS returns an SQS client: the sender of the dispatcher and the rerunner.
func (a *App) SQS() *sqs.Client { return sqs.NewFromConfig(a.AWS) }

// Dispatcher builds the dispatch handler, which sends through sender
// (a.SQS() in Lambda).
func (a *App) Dispatcher(sender dispatch.Sender) (*dispatch.Dispatcher, error) {
	return a.dispatcher(sender, "dispatch")
}

// dispatcher builds a dispatcher whose metrics name function.
func (a *App) dispatcher(sender dispatch.Sender, function string) (*dispatch.Dispatcher, error) {
	if sender == nil {
		return nil, fmt.Errorf("%s: no SQS sender", function)
	}
	creds, err := a.Credentials()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", function, err)
	}
	events, err := a.EventPublisher()
	if err != nil {
		return nil, err
	}
	return dispatch.New(a.outboxStore(), sender, dispatch.Config{
		Reconnections: creds, LimitResets: pace.NewPacer(a.Pool),
		Routes: a.Routes(), BatchSize: a.Config.ClaimBatchSize, MaxPerRun: a.Config.DispatchMaxPerRun,
		MaxAttempts: a.Config.MaxAttempts, Lease: a.Config.Lease, Logger: a.Logger,
		MaxInFlight: a.Config.DispatchMaxInFlight, ConnectionMaxInFlight: a.Config.ConnectionMaxInFlight,
		ProviderMaxInFlight: a.Providers().MaxInFlightDefaults(),
		RoomWait:            DispatchRoomWait,
		Prerequisites:       []string{supplier.CommandType},
		Metrics:             metrics.NewEmitter(a.Out, function),
		Events:              events,
		ConnectionCounts: func(ctx context.Context) (health.Counts, error) {
			return health.ReadCounts(ctx, a.Pool)
		},
	})
}

// EventPublisher builds the publisher of the recorded events to
// EVENT_BUS_NAME; nil (no error) when events are off. A nil publisher is
// returned as a nil interface, so the dispatcher sees none.
func (a *App) EventPublisher() (dispatch.EventPublisher, error) {
	if a.Config.EventBusName == "" {
		return nil, nil
	}
	p, err := event.NewPublisher(a.Pool, eventbridge.NewFromConfig(a.AWS), event.Config{
		BusName: a.Config.EventBusName, Logger: a.Logger})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Health is the connection health the outbox statements keep, from the
// configuration; events are recorded only with EVENT_BUS_NAME set.
func (a *App) Health() outbox.Health {
	return outbox.Health{Events: a.Config.EventBusName != "", FailingAfter: a.Config.ConnectionFailingAfter,
		DisableAfter: a.Config.ConnectionDisableAfter, DisableMinSpan: a.Config.ConnectionDisableMinSpan,
		CommandFailingAfterAttempts: a.Config.CommandFailingAfterAttempts}
}

// outboxStore is the outbox store of every function that claims or
// records: one circuit breaker setting for both (CIRCUIT_FAILURE_THRESHOLD 0:
// no circuit state is read or written).
func (a *App) outboxStore() *outbox.Store {
	return outbox.NewStore(a.Pool).WithCircuit(outbox.Circuit{
		FailureThreshold: a.Config.CircuitFailureThreshold, Cooldown: a.Config.CircuitCooldown}).WithHealth(a.Health()).
		WithMissingRoutines(func(statements []string) {
			a.Logger.Warn("statement routines missing: these statements run plain, planned at every call, until make migrate installs this build's routines (outboxctl check)",
				"statements", statements)
		})
}

// Providers builds the provider registry. The sandbox is in it only with
// SANDBOX_PROVIDER_ENABLED: in a real deployment a sandbox connection must
// not mark orders completed that nobody received.
func (a *App) Providers() provider.Registry { return a.providers(nil) }

// providers builds the registry on transport: nil for the guarded client
// of each provider, push.PreviewTransport for the preview.
func (a *App) providers(transport http.RoundTripper) provider.Registry {
	accounting := provider.AccountingConfig{AllowPrivateNetworks: a.Config.AllowPrivateNetworks, Timeout: a.Config.ProviderTimeout,
		Transport: transport}
	ps := []provider.Provider{
		provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: a.Config.AllowPrivateNetworks, Timeout: a.Config.ProviderTimeout,
			Transport: transport}),
		provider.NewXero(accounting),
		provider.NewQuickBooks(accounting),
	}
	if a.Config.SandboxProviderEnabled {
		ps = append(ps, provider.NewSandbox(provider.SandboxConfig{}))
	}
	return provider.NewRegistry(ps...)
}

// Credentials builds the Secrets Manager resolver with its cache. It
// refreshes OAuth2 secrets (xero, quickbooks) through the guarded HTTP
// client, takes their refresh leases in the database and writes refreshed
// tokens back to Secrets Manager.
func (a *App) Credentials() (*credential.Resolver, error) {
	ttl := a.Config.CredentialCacheTTL
	if ttl == 0 { // CREDENTIAL_CACHE_TTL=0 turns the cache off
		ttl = -1
	}
	sm := secretsmanager.NewFromConfig(a.AWS)
	return credential.NewResolver(sm, credential.ResolverConfig{
		Prefix: a.Config.CredentialReferencePrefix, Region: a.Config.AWSRegion, TTL: ttl,
		AllowUntagged: a.Config.CredentialAllowUntagged, Logger: a.Logger,
		OAuth: credential.OAuthConfig{DB: a.Pool, Secrets: sm,
			HTTPClient:           provider.GuardedHTTPClient(a.Config.AllowPrivateNetworks, a.Config.ProviderTimeout),
			AllowPrivateNetworks: a.Config.AllowPrivateNetworks, Events: a.Config.EventBusName != "",
			Margin: a.Config.OAuthRefreshMargin},
	})
}

// PushWorker builds the push_purchase_order handler with the Secrets
// Manager resolver of Credentials.
func (a *App) PushWorker() (*push.Worker, error) {
	creds, err := a.Credentials()
	if err != nil {
		return nil, err
	}
	return a.PushWorkerWith(creds)
}

// PushWorkerWith builds the push_purchase_order handler on another
// credential resolver (the benchmarks count its lookups).
func (a *App) PushWorkerWith(creds push.Credentials) (*push.Worker, error) {
	return a.pushWorker(creds, purchaseorder.NewCommand(a.Pool), "push-purchase-order")
}

// PushSupplierWorker builds the push_supplier handler with the Secrets
// Manager resolver of Credentials.
func (a *App) PushSupplierWorker() (*push.Worker, error) {
	creds, err := a.Credentials()
	if err != nil {
		return nil, err
	}
	return a.pushWorker(creds, supplier.NewCommand(a.Pool), "push-supplier")
}

// pushWorker builds the handler of cmd's queue, whose metrics name
// function.
func (a *App) pushWorker(creds push.Credentials, cmd push.Command, function string) (*push.Worker, error) {
	store := a.outboxStore()
	// Read once as the container starts; on failure the first record reads
	// them (the start must not fail for a database that is briefly away).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := store.ReadTextLengths(ctx); err != nil {
		a.Logger.Warn("could not read the outbox's text lengths at start; the first record reads them", "error", err.Error())
	}
	cancel()
	var events push.EventPublisher
	if a.Config.EventBusName != "" {
		p, err := event.NewPublisher(a.Pool, eventbridge.NewFromConfig(a.AWS), event.Config{
			BusName: a.Config.EventBusName, Logger: a.Logger})
		if err != nil {
			return nil, err
		}
		events = p
	}
	return push.New(store, creds, cmd, push.Config{
		Events:    events,
		Providers: a.Providers(), Concurrency: a.Config.PushConcurrency, MaxAttempts: a.Config.MaxAttempts,
		ProviderTimeout: a.Config.ProviderTimeout, Logger: a.Logger,
		Metrics: metrics.NewEmitter(a.Out, function),
		Pacer:   pace.NewPacer(a.Pool),
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
