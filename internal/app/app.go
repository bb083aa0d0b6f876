// Package app is the composition root of the pipeline: on a container's
// base (internal/appbase: configuration, logger, pool, AWS configuration)
// it builds the handlers of dispatch, push, rerun and inspect, once per
// container. Their functions/*/main.go, the demo and the benchmarks
// assemble the pipeline through it; release-dead-letters and retention need
// none of it and start on appbase alone, so their bootstraps do not link
// the providers, the credential resolver or EventBridge.
package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"integration-outbox/internal/appbase"
	"integration-outbox/internal/config"
	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/event"
	"integration-outbox/internal/health"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/supplier"
)

// App is a container's base (appbase.App: configuration, logger, pool,
// AWS configuration) with the builders of the pipeline's handlers.
type App struct{ *appbase.App }

// AWSLoader builds the AWS SDK configuration (appbase.AWSLoader).
type AWSLoader = appbase.AWSLoader

// New reads the configuration through getenv and connects (appbase.New).
// The Lambda functions use it.
func New(ctx context.Context, getenv func(string) string, logOut io.Writer, need config.Need) (*App, error) {
	return NewWithAWS(ctx, getenv, logOut, need, appbase.EnvironmentAWS)
}

// NewWithAWS is New with another AWS configuration loader: the operator
// tools pass the SDK's default chain (internal/opsaws), so that named
// profiles and SSO work on a workstation.
func NewWithAWS(ctx context.Context, getenv func(string) string, logOut io.Writer, need config.Need, loadAWS AWSLoader) (*App, error) {
	b, err := appbase.NewWithAWS(ctx, getenv, logOut, need, loadAWS)
	if err != nil {
		return nil, err
	}
	return &App{b}, nil
}

// Start is the main of every function built on App (appbase.Start).
func Start(name string, need config.Need, build func(*App) (handler any, err error)) {
	appbase.Start(name, need, func(b *appbase.App) (any, error) { return build(&App{b}) })
}

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
	return dispatch.New(a.OutboxStore(), sender, dispatch.Config{
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
	store := a.OutboxStore()
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
