package app

import (
	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/inspect"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/supplier"
)

// Inspector builds the console's read-only inspection handler, with the
// preview of what a push would send: the push's own commands and
// providers, on a transport that sends nothing (push.PreviewTransport).
func (a *App) Inspector() *inspect.Inspector {
	previewer := push.NewPreviewer(push.Config{Providers: a.providers(push.PreviewTransport()),
		ProviderTimeout: a.Config.ProviderTimeout, Logger: a.Logger},
		map[string]func(pgx.Tx) push.Command{
			purchaseorder.CommandType: func(tx pgx.Tx) push.Command { return purchaseorder.NewCommand(tx) },
			supplier.CommandType:      func(tx pgx.Tx) push.Command { return supplier.NewCommand(tx) },
		})
	return inspect.New(a.Pool, inspect.Config{MaxAttempts: a.Config.MaxAttempts, Logger: a.Logger, Previewer: previewer})
}
