package provider

import (
	"net"
	"net/http"
	"time"
)

// GuardedHTTPClient returns an HTTP client for calls to URLs a tenant
// configured, with the webhook's guard: unless allowPrivate
// (WEBHOOK_ALLOW_PRIVATE_NETWORKS), every connection to an address that is
// not public is refused at connect time (see isPublicAddr); it never uses a
// proxy from the environment and never follows a redirect. timeout bounds
// each request. The credential package refreshes OAuth2 tokens with it
// (credential cannot import this package, which imports credential).
func GuardedHTTPClient(allowPrivate bool, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		dialer.Control = refuseNonPublic
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would bypass the guard
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   timeout,
			ExpectContinueTimeout: time.Second,
		},
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
