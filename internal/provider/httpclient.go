package provider

import (
	"cmp"
	"net"
	"net/http"
	"time"
)

// HTTPConfig configures a provider that calls over HTTP: the webhook and
// the accounting providers (xero, quickbooks).
type HTTPConfig struct {
	// AllowPrivateNetworks allows http URLs and loopback, private and other
	// non-public targets (WEBHOOK_ALLOW_PRIVATE_NETWORKS, local mode and
	// tests only).
	AllowPrivateNetworks bool
	// Timeout bounds one call (PROVIDER_TIMEOUT); default 10s. The caller's
	// ctx deadline wins when it is earlier.
	Timeout time.Duration
	// MaxBodyBytes is how much of a response body is read; default 1 MiB.
	MaxBodyBytes int64
	// Clock stamps webhook signatures and dates a Retry-After given as an
	// HTTP date; default time.Now.
	Clock func() time.Time
	// Resolver looks target host names up; nil means the system resolver.
	// The guard checks every address it returns, so tests use it to make
	// names resolve to non-public addresses without any DNS traffic.
	Resolver *net.Resolver
	// Transport, when set, replaces the guarded transport (the preview's
	// capture: push.PreviewTransport, which sends nothing).
	Transport http.RoundTripper
}

// withDefaults gives the zero fields of cfg their defaults.
func (cfg HTTPConfig) withDefaults() HTTPConfig {
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultWebhookTimeout)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultWebhookMaxBodyBytes)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return cfg
}

// client is the provider's http.Client: the guarded one, or Transport's.
func (cfg HTTPConfig) client() *http.Client {
	c := newGuardedClient(cfg.Timeout, cfg.AllowPrivateNetworks, cfg.Resolver)
	if cfg.Transport != nil {
		c.Transport = cfg.Transport
	}
	return c
}

// newGuardedClient returns the http.Client every HTTP provider uses: no
// proxy from the environment, no redirects followed and, unless
// allowPrivate (WEBHOOK_ALLOW_PRIVATE_NETWORKS), every target address that
// is not public refused at connect time (see isPublicAddr). resolver looks
// host names up; nil means the system resolver.
func newGuardedClient(timeout time.Duration, allowPrivate bool, resolver *net.Resolver) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Resolver: resolver}
	if !allowPrivate {
		// Control runs on the resolved address of every connection attempt,
		// before connect(2): DNS answers (rebinding included) cannot route
		// around it, and no packet reaches a refused address.
		dialer.Control = refuseNonPublic
	}
	transport := &http.Transport{
		Proxy:                 nil, // never a proxy from the environment: it would bypass the guard
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: transport,
		// A redirect could lead to a target the config never named; the
		// 3xx is answered as a rejection instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
