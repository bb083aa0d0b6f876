// Command outboxctl is the operator's view of the outbox without SQL, against
// DATABASE_URL (or DATABASE_SECRET_ARN):
//
//	outboxctl list [-org ID] [-status S] [-connection ID] [-limit N]
//	outboxctl show ID -org ORG
//	outboxctl rerun [-f payload.json]      (the payload on stdin without -f)
//	outboxctl stuck [-org ID] [-accepted-for 1h] [-overdue-for 5m] [-limit N]
//	outboxctl check
//	outboxctl connect xero|quickbooks -org ID [-client-id ID] [-insert] ...
//
// check is the schema check of make migrate (internal/schemacheck), for an
// operator who changed the host's tables: it names what the host's tables
// lack and every statement of the functions PostgreSQL refuses, and changes
// nothing.
//
// rerun runs the same rerun as functions/rerun (internal/rerun), audit row
// included; its dispatchNow needs PUSH_PURCHASE_ORDER_QUEUE_URL and the AWS
// environment (AWS_REGION, credentials, AWS_ENDPOINT_URL for an emulator).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"integration-outbox/internal/app"
	"integration-outbox/internal/config"
	"integration-outbox/internal/opsaws"
)

const usage = `usage:
  outboxctl list [-org ID] [-status S] [-connection ID] [-limit N]
  outboxctl show ID -org ORG
  outboxctl preview ID -org ORG       (the request the push would send now; sends nothing)
  outboxctl rerun [-f payload.json]   (reads the payload from stdin without -f)
  outboxctl stuck [-org ID] [-accepted-for 1h] [-overdue-for 5m] [-limit N]
  outboxctl check                     (the host's tables and every statement, against the database)
  outboxctl connect xero|quickbooks -org ID [-client-id ID] [-redirect-uri URL]
      [-location ID] [-connection ID] [-tenant-id ID] [-insert] ...
      (the OAuth2 consent flow; the app's secret in OAUTH_CLIENT_SECRET;
      "outboxctl connect xero -h" lists every flag)

Environment: DATABASE_URL (or DATABASE_SECRET_ARN), MAX_ATTEMPTS, LOG_LEVEL
(default warn); rerun's dispatchNow also needs PUSH_PURCHASE_ORDER_QUEUE_URL
and the AWS environment; connect needs the AWS environment (the secret),
CREDENTIAL_REFERENCE_PREFIX, WEBHOOK_ALLOW_PRIVATE_NETWORKS (local
stand-ins only), and DATABASE_URL with -insert.
`

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli is one invocation's environment.
type cli struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// usageError is a command line the CLI cannot run; it prints the usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run runs one command line and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{getenv: withDefaults(getenv), stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	commands := map[string]func(context.Context, []string) error{
		"list": c.list, "show": c.show, "rerun": c.rerun, "stuck": c.stuck, "check": c.check, "connect": c.connect,
		"preview": c.preview,
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "outboxctl: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	err := cmd(ctx, args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "outboxctl %s: %s\n%s", args[0], err, usage)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "outboxctl %s: %s\n", args[0], err)
		return exitError
	}
}

// withDefaults quiets the JSON logs of the shared code on the terminal
// unless LOG_LEVEL asks for them.
func withDefaults(getenv func(string) string) func(string) string {
	return func(name string) string {
		if v := getenv(name); v != "" || name != "LOG_LEVEL" {
			return v
		}
		return "warn"
	}
}

// open builds the application (pool, configuration, logs on stderr).
func (c *cli) open(ctx context.Context) (*app.App, error) {
	return app.NewWithAWS(ctx, c.getenv, c.stderr, config.Need(0), opsaws.Load)
}
