package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
)

const (
	pipelineJobs        = 1000
	pipelineConnections = 10
)

// cacheMode is how the credential resolver caches.
type cacheMode struct {
	Name  string
	Label string
	// TTL is ResolverConfig.TTL: 0 is the default (5m, CREDENTIAL_CACHE_TTL's
	// default), negative turns the cache off.
	TTL time.Duration
}

var (
	cacheOn  = cacheMode{Name: "cache on (5 min TTL)", Label: "on"}
	cacheOff = cacheMode{Name: "cache off (TTL < 0)", Label: "off", TTL: -1}
)

// pipelineResult counts what 1,000 jobs on 10 connections cost through one
// dispatch container and one push container: measurement 4 and the request
// counts of measurement 7.
type pipelineResult struct {
	Mode        string
	Jobs        int
	Connections int
	// Dispatch: invocations (Run calls), their durations, SendMessageBatch
	// calls and the statements they ran.
	DispatchRuns       []time.Duration
	SendBatchCalls     int64
	DispatchStatements int64
	// Statements lists the dispatch statements, then the push statements.
	Statements []statement
	// Push: invocations (Handle calls, one per SQS batch) and durations.
	PushRuns       []time.Duration
	PushStatements int64
	// Secrets Manager calls that reached moto.
	DescribeCalls, GetCalls int64
}

func (p pipelineResult) secretCalls() int64 { return p.DescribeCalls + p.GetCalls }

// measurePipeline dispatches 1,000 due jobs (sandbox provider, no latency,
// each connection naming its own tagged secret) and pushes them batch after
// batch through one push worker whose resolver counts its AWS calls.
func measurePipeline(ctx context.Context, env *benchEnv, mode cacheMode) (pipelineResult, error) {
	res := pipelineResult{Mode: mode.Name, Jobs: pipelineJobs, Connections: pipelineConnections}
	url, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tenants, err := createTenants(ctx, env, conn, pipelineConnections, "sandbox", `{"latencyMs": 0}`,
		"integrations/bench/cache-"+mode.Label+"/")
	if err != nil {
		return res, err
	}
	if err := seedJobs(ctx, conn, tenants, "sandbox", pipelineJobs, 3); err != nil {
		return res, err
	}
	if _, err := conn.Exec(ctx, `analyze`); err != nil {
		return res, err
	}

	a, err := env.newApp(ctx, url)
	if err != nil {
		return res, err
	}
	defer a.Close()
	secrets := &countingSecrets{api: secretsmanager.NewFromConfig(a.AWS)}
	resolver, err := credential.NewResolver(secrets, credential.ResolverConfig{
		Prefix: a.Config.CredentialReferencePrefix, Region: a.Config.AWSRegion, TTL: mode.TTL})
	if err != nil {
		return res, err
	}
	w, err := a.PushWorkerWith(resolver)
	if err != nil {
		return res, err
	}
	q := newQueueSender(pipelineJobs)
	d, err := a.Dispatcher(q)
	if err != nil {
		return res, err
	}

	if err := resetStatements(ctx, conn); err != nil {
		return res, err
	}
	for dispatched := 0; dispatched < pipelineJobs; {
		var s dispatch.Summary
		took, err := timed(func() (err error) { s, err = d.Run(ctx, dispatch.Request{}); return })
		if err != nil {
			return res, err
		}
		if s.Claimed == 0 {
			return res, fmt.Errorf("dispatch claimed nothing with %d of %d jobs dispatched", dispatched, pipelineJobs)
		}
		res.DispatchRuns = append(res.DispatchRuns, took)
		dispatched += s.Dispatched
	}
	res.SendBatchCalls = q.calls.Load()
	stmts, n, err := countStatements(ctx, conn)
	if err != nil {
		return res, err
	}
	res.DispatchStatements, res.Statements = n, stmts

	if err := resetStatements(ctx, conn); err != nil {
		return res, err
	}
	for handled := 0; handled < pipelineJobs; {
		ev, _ := q.take(ctx)
		took, err := timed(func() error {
			resp, err := w.Handle(ctx, ev)
			if err == nil && len(resp.BatchItemFailures) > 0 {
				err = fmt.Errorf("%d batch item failures", len(resp.BatchItemFailures))
			}
			return err
		})
		if err != nil {
			return res, err
		}
		res.PushRuns = append(res.PushRuns, took)
		handled += len(ev.Records)
	}
	if stmts, res.PushStatements, err = countStatements(ctx, conn); err != nil {
		return res, err
	}
	res.Statements = append(res.Statements, stmts...)
	res.DescribeCalls, res.GetCalls = secrets.describe.Load(), secrets.gets.Load()
	done, err := completed(ctx, conn)
	if err != nil {
		return res, err
	}
	if done != pipelineJobs {
		return res, fmt.Errorf("%d of %d jobs completed", done, pipelineJobs)
	}
	return res, nil
}
