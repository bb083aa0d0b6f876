package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// report is everything one run measured.
type report struct {
	Began      time.Time
	Took       time.Duration
	Machine    machine
	Command    string
	Claim      []claimSize
	Worker     workerResult
	CacheOn    pipelineResult
	CacheOff   pipelineResult
	Throughput throughputResult
	// BatchLever is our pipeline at larger push batches (-only batch).
	BatchLever []batchLeverRun
	Cold       []coldStart
	Sizes      []bootstrapSize
	Memory     lambdaMemory
	Fair       []fairClaimSize
	Visibility []visibilityClaim
	Followers  *followersClaim
	// CommandTypes is the claim with a second command type due.
	CommandTypes *commandTypesClaim
	Tokens       *tokenResult
	Overload     []overloadRun
	Install      []installRun
	WAL          []walRun
	Churn        []churnRun
	// Pooler is the claim and our pipeline behind PgBouncer (-only pooler).
	Pooler *poolerResult
	// Parts are the churn's statements alone (measureParts).
	Parts  *partsResult
	Errors []string
	// Only is the one measurement run (-only), or empty for all of them.
	Only string
}

// Targets each measurement is held to (the Target column of results.md).
const (
	targetClaimFlat      = 1.5  // claim at the largest size / at the smallest
	targetClaimVsLegacy  = 50.0 // legacy (primary keys only) / ours at the largest size
	targetBatchRatio     = 0.15
	targetStatements     = 1.0
	targetSecretsPerConn = 2.0
	targetRiver          = 1.0
	// targetRiverPOLoadPG bounds our PostgreSQL CPU per delivered command
	// over River's with the purchase-order load worker.
	targetRiverPOLoadPG  = 1.5
	targetColdStart      = 60 * time.Millisecond
	targetBootstrapBytes = 12 << 20
)

type tableRow struct{ n, measure, ours, beside, ratio, target, status string }

func status(met bool) string {
	if met {
		return "met"
	}
	return "**missed**"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
func mib(b int64) string        { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func x(f float64) string        { return fmt.Sprintf("%.2f×", f) }
func usd(f float64) string      { return fmt.Sprintf("$%.2f", f) }
func rows(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func (r *report) table() []tableRow {
	var t []tableRow
	add := func(row tableRow) { t = append(t, row) }

	// 1. Claim scaling.
	for _, c := range r.Claim {
		ours := c.median(variantOurs)
		add(tableRow{"1", fmt.Sprintf("Claim of 50 (database part), %s rows, %s due: median of %d", rows(c.Rows), rows(c.Due), len(c.Samples[variantOurs])),
			ms(ours) + " in this run",
			fmt.Sprintf("legacy SQL, primary keys only: %s; with a (status, created_at) index: %s", ms(c.median(variantLegacyPK)), ms(c.median(variantLegacyPlain))),
			fmt.Sprintf("legacy/ours: %s (PK only), %s (index)", x(float64(c.median(variantLegacyPK))/float64(ours)), x(float64(c.median(variantLegacyPlain))/float64(ours))),
			"", ""})
	}
	if n := len(r.Claim); n >= 2 {
		small, large := r.Claim[0], r.Claim[n-1]
		flat := float64(large.median(variantOurs)) / float64(small.median(variantOurs))
		vsLegacy := float64(large.median(variantLegacyPK)) / float64(large.median(variantOurs))
		add(tableRow{"1", fmt.Sprintf("Claim growth, %s rows / %s rows", rows(large.Rows), rows(small.Rows)),
			x(flat),
			fmt.Sprintf("legacy, PK only: %s; legacy, index: %s",
				x(float64(large.median(variantLegacyPK))/float64(small.median(variantLegacyPK))),
				x(float64(large.median(variantLegacyPlain))/float64(small.median(variantLegacyPlain)))),
			"", fmt.Sprintf("≤ %.1f×", targetClaimFlat), status(flat <= targetClaimFlat)})
		add(tableRow{"1", fmt.Sprintf("Claim at %s rows against the legacy worker's SQL with primary keys only", rows(large.Rows)),
			"", "", "legacy/ours " + x(vsLegacy), fmt.Sprintf("≥ %.0f×", targetClaimVsLegacy), status(vsLegacy >= targetClaimVsLegacy)})
	}

	// 2. Worker concurrency.
	if len(r.Worker.Warm) > 0 {
		warm := median(r.Worker.Warm)
		add(tableRow{"2", fmt.Sprintf("Push batch of 10 records, webhook answering after 100 ms: wall / (10 × 100 ms); median of %d warm batches", len(r.Worker.Warm)),
			fmt.Sprintf("%.3f (first batch of a fresh container: %.3f); receiver saw %d requests at once", seqRatio(warm), seqRatio(r.Worker.Cold), r.Worker.MaxInFlight),
			"legacy: 1.000 (sequential loop, by construction)",
			fmt.Sprintf("%.1f× faster than the legacy worker", 1/seqRatio(warm)),
			fmt.Sprintf("≤ %.2f", targetBatchRatio), status(seqRatio(warm) <= targetBatchRatio)})
	}

	// 3. Statements per job.
	if r.Worker.StatementsTotal > 0 {
		per := float64(r.Worker.StatementsTotal) / batchSize
		add(tableRow{"3", "Statements per job in the push worker, batch of 10 (pg_stat_statements calls)",
			fmt.Sprintf("%.2f (%d statements for 10 jobs)", per, r.Worker.StatementsTotal),
			"legacy: 3.02 (per job: select PO, load connection, update; + 1/50 of its claim)",
			fmt.Sprintf("%.1f× fewer", 3.02/per),
			fmt.Sprintf("≤ %.0f", targetStatements), status(per <= targetStatements)})
	}
	if p := r.CacheOn; p.Jobs > 0 {
		disp := float64(p.DispatchStatements) / float64(p.Jobs)
		push := float64(p.PushStatements) / float64(p.Jobs)
		add(tableRow{"3", fmt.Sprintf("Statements per job end to end, %d jobs (dispatch + push)", p.Jobs),
			fmt.Sprintf("%.3f (dispatch %.3f + push %.3f)", disp+push, disp, push),
			"legacy: 3.02",
			fmt.Sprintf("%.1f× fewer", 3.02/(disp+push)), "", ""})
	}

	// 4. Secrets Manager calls.
	if r.CacheOn.Jobs > 0 && r.CacheOff.Jobs > 0 {
		on, off := r.CacheOn, r.CacheOff
		perConn := float64(on.secretCalls()) / float64(on.Connections)
		add(tableRow{"4", fmt.Sprintf("Secrets Manager calls per %s jobs on %d connections, one container (calls reaching moto)", rows(on.Jobs), on.Connections),
			fmt.Sprintf("cache on: %d (%d DescribeSecret + %d GetSecretValue; %.1f per connection)", on.secretCalls(), on.DescribeCalls, on.GetCalls, perConn),
			fmt.Sprintf("cache off: %d (%d + %d)", off.secretCalls(), off.DescribeCalls, off.GetCalls),
			fmt.Sprintf("%.0f× fewer with the cache", float64(off.secretCalls())/float64(max(on.secretCalls(), 1))),
			fmt.Sprintf("≤ %.0f per connection per TTL per container", targetSecretsPerConn), status(perConn <= targetSecretsPerConn)})
	}

	// 5. Throughput against River.
	t = append(t, throughputRows(r.Throughput)...)

	// 6. Size and cold start.
	var minimal coldStart
	for _, c := range r.Cold {
		if c.Function == minimalFunction {
			minimal = c
		}
	}
	var minimalSize bootstrapSize
	for _, s := range r.Sizes {
		if s.Function == minimalFunction {
			minimalSize = s
		}
	}
	for _, s := range r.Sizes {
		if s.Function == minimalFunction {
			continue
		}
		if s.Err != "" {
			add(tableRow{"6", "Bootstrap size, functions/" + s.Function, "does not build (skipped): " + clip(s.Err, 160), "", "", "", ""})
			continue
		}
		add(tableRow{"6", fmt.Sprintf("Bootstrap size, functions/%s (arm64 / amd64)", s.Function),
			mib(s.Arm64) + " / " + mib(s.Amd64),
			fmt.Sprintf("minimal aws-lambda-go function: %s / %s", mib(minimalSize.Arm64), mib(minimalSize.Amd64)),
			x(float64(s.Arm64)/float64(max(minimalSize.Arm64, 1))) + " the minimal (arm64)",
			"≤ 12 MiB", status(max(s.Arm64, s.Amd64) <= targetBootstrapBytes)})
	}
	for _, c := range r.Cold {
		if c.Function == minimalFunction {
			continue
		}
		med := median(c.Starts)
		note := ""
		if c.FunctionError != "" {
			note = " (answered with a function error: " + clip(c.FunctionError, 120) + ")"
		}
		add(tableRow{"6", fmt.Sprintf("Cold start under the emulator, functions/%s (amd64): invoke to first response, median of %d", c.Function, len(c.Starts)),
			fmt.Sprintf("%s in this run (init phase %.1f ms); peak RSS %s%s", ms(med), medianFloat(c.Inits), kib(medianInt(c.PeakRSS)), note),
			fmt.Sprintf("minimal function: %s (init phase %.1f ms); peak RSS %s", ms(median(minimal.Starts)), medianFloat(minimal.Inits), kib(medianInt(minimal.PeakRSS))),
			x(float64(med)/float64(max(median(minimal.Starts), 1))) + " the minimal",
			"≤ 60 ms", status(med <= targetColdStart)})
	}

	// 7. Cost.
	if r.CacheOn.Jobs > 0 && r.CacheOff.Jobs > 0 {
		on, off := costPerMillion(r.CacheOn, r.Memory, 0), costPerMillion(r.CacheOff, r.Memory, 0)
		add(tableRow{"7", "Cost per million commands, sandbox provider (measured durations)",
			"cache on: " + r.costText(on), "cache off: " + r.costText(off),
			fmt.Sprintf("off/on %s", x(off.totalUSD(r.Memory)/on.totalUSD(r.Memory))), "", ""})
		if len(r.Worker.Warm) > 0 {
			warm := median(r.Worker.Warm)
			on100, off100 := costPerMillion(r.CacheOn, r.Memory, warm), costPerMillion(r.CacheOff, r.Memory, warm)
			add(tableRow{"7", "Cost per million commands, push batches lasting as long as measurement 2's warm batch (100 ms provider)",
				"cache on: " + r.costText(on100), "cache off: " + r.costText(off100),
				fmt.Sprintf("off/on %s", x(off100.totalUSD(r.Memory)/on100.totalUSD(r.Memory))), "", ""})
		}
	}

	t = append(t, batchLeverRows(r.BatchLever)...)

	// 8. Live install.
	t = append(t, installRows(r.Install)...)
	t = append(t, walRows(r.WAL)...)

	// 10. Churn.
	t = append(t, churnRows(r.Churn)...)
	t = append(t, partsRows(r.Parts)...)

	// P. Behind a transaction pooler.
	t = append(t, poolerTableRows(r.Pooler)...)
	return t
}

func (r *report) costText(c cost) string {
	return fmt.Sprintf("%s = Lambda %s (%.0f requests, %.0f GB-s) + SQS %s (%.0f requests) + Secrets Manager %s (%.0f calls)",
		usd(c.totalUSD(r.Memory)), usd(c.lambdaUSD(r.Memory)), c.LambdaRequests, c.GBSeconds,
		usd(c.sqsUSD()), c.SQSRequests, usd(c.secretsUSD()), c.SecretCalls)
}

func kib(k int64) string { return fmt.Sprintf("%.1f MiB", float64(k)/1024) }

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func medianFloat(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianInt(v []int64) int64 {
	f := make([]float64, len(v))
	for i, n := range v {
		f[i] = float64(n)
	}
	return int64(medianFloat(f))
}

// markdown renders the results page: the run's circumstances, the one
// table, and how each figure was obtained.
func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Benchmarks\n\n")
	p("Measured side by side in one run: %s UTC; %d cores, %s, PostgreSQL 15; command: `%s`; the whole run took %s.\n\n",
		r.Began.UTC().Format("2006-01-02 15:04"), r.Machine.CPUs, r.Machine.GoVersion, r.Command, r.Took.Round(time.Second))
	p("Absolute times only give scale; the figures to compare are the ratios and counts, each taken beside its reference in the same run. \"Legacy\" is the worker this project replaces: its claim is `bench/testdata/legacy_claim.sql`, verbatim.\n\n")
	p("| # | Measure | Ours | Beside it | Ratio | Target | Where we stand |\n|---|---|---|---|---|---|---|\n")
	for _, row := range r.table() {
		p("| %s | %s | %s | %s | %s | %s | %s |\n", row.n, cell(row.measure), cell(row.ours), cell(row.beside), cell(row.ratio), cell(row.target), row.status)
	}
	if len(r.Errors) > 0 {
		p("\n**Not measured in this run:**\n\n")
		for _, e := range r.Errors {
			p("- %s\n", clip(e, 400))
		}
	}
	p("\n## How each figure was taken\n\n")
	if r.Only == "" {
		p("1. **Claim.** Each size is bulk-loaded (`insert ... select generate_series`) into a migrated database: 10 connections; every 100th row due (3 in 4 `queued`, 1 in 4 `failed` with a past `next_attempt_at`), the rest `completed`, created a second apart so the due rows are spread through the table; then `VACUUM (ANALYZE)` and autovacuum off on the outbox so every claim meets the same table. The database is cloned (`create database ... template ... strategy file_copy`) twice for the legacy worker: every outbox index but the primary key dropped, and that plus a plain `(status, created_at)` index. Ours is `outbox.Store.Claim` (limit 50, MAX_ATTEMPTS 10, lease 900 s) through its routine (`internal/sqlroutine`, whose plan the server keeps; the functions send its call unnamed, this measurement with pgx's default cached prepared statement); the legacy worker's claim is its SQL verbatim (with its join on `integration_connections`), sent as node-postgres sends a parameterised query (an unnamed statement, planned per call). Every claim runs in a transaction that is rolled back, so each claims the same 50 rows; it must return 50 rows or the run fails. The variants alternate claim by claim, %d unmeasured rounds first; the time covers the statement and reading its rows.\n", claimWarmup)
		p("2. **Worker batch.** 10 connections of provider `webhook` (`config_json.url` = an `httptest` receiver on 127.0.0.1 that answers 201 after 100 ms; `WEBHOOK_ALLOW_PRIVATE_NETWORKS=true`), each naming its own secret in moto. Per batch: 10 jobs (purchase orders of 3 lines) are inserted, the real dispatcher claims them and sends one message each to an in-process queue, and the 10 messages go as one SQS event to `push.Worker.Handle`, built by `internal/app` as the function builds it (credential cache on). Wall time of `Handle` / 1 s. The first batch of the fresh worker is reported apart (it fetches the 10 secrets and opens its connections).\n")
		p("3. **Statements.** `pg_stat_statements` (preloaded, `track = all`) is reset after the batch's dispatch and read after `Handle` returns; every call on the measured database counts except the reset and the read. The legacy worker's count is read from its code: per `push_purchase_order` job one purchase-order select, one connection load (`integrations.load`, taken as one statement), one update, plus its claim shared by 50 jobs: 3 + 1/50 = 3.02. The end-to-end row counts the 1,000-job run of measurement 4 (cache on): dispatch statements (idle check, dead-letter sweep and claims) and push statements, over the jobs.\n")
		if len(r.Worker.Statements) > 0 {
			p("   Statements of the measured batch:\n")
			for _, s := range r.Worker.Statements {
				p("   - %d × `%s`\n", s.Calls, clip(s.Query, 110))
			}
		}
		if st := r.CacheOn.Statements; len(st) > 0 {
			var total float64
			for _, s := range st {
				total += s.ExecMs
			}
			p("   Statements of the 1,000-job run (cache on), with their share of the server's execution time:\n")
			for _, s := range st {
				p("   - %d × (%.0f%%) `%s`\n", s.Calls, 100*s.ExecMs/total, clip(s.Query, 110))
			}
		}
		p("4. **Secrets Manager.** 1,000 jobs on 10 connections (sandbox provider, no latency), each connection naming its own secret tagged with its organization; jobs are seeded round-robin over the connections. One dispatch run and one push worker (one container) handle them batch after batch; the resolver's `SecretsAPI` is wrapped in a decorator that counts the calls reaching moto. Cache on is the default TTL (5 min); cache off is `ResolverConfig.TTL < 0` (concurrent look-ups of one reference still share their calls: batches are taken from the in-process queue as messages arrive, so a batch may hold two jobs of one connection, which then share one look-up). In a deployment `CREDENTIAL_CACHE_TTL=0` selects the same (internal/app maps it to a negative TTL).\n")
		b.WriteString(throughputMethod(r.Throughput))
		p("6. **Size and cold start.** Each `functions/*` folder is built with `CGO_ENABLED=0 go build -tags lambda.norpc -trimpath -ldflags='-s -w'` for linux/arm64 and linux/amd64 (a folder that does not build is reported and skipped), and so is a minimal aws-lambda-go function (`bench/minimal-lambda`) as the reference. Each amd64 bootstrap is started %d times, each in a fresh Lambda Runtime Interface Emulator on loopback ports (the emulator starts the bootstrap on the first invoke), the functions taking turns; the time is from the invoke POST to the response (the init phase beside it is the emulator's `INIT REPORT`: bootstrap start to its first request for work), and peak RSS is the bootstrap's `VmHWM` after that response. Events: dispatch `{}` (an empty migrated outbox: its idle check finds nothing to do, and it skips the sweep and the claim, whose plans a new connection would otherwise make: the claim's alone costs about 27 ms when rows are due), push one SQS record whose claim does not exist (it starts nothing and acknowledges), any other function its first `events/*.json` or `{}`. Environment: `DATABASE_URL`, moto's `AWS_ENDPOINT_URL`, `AWS_REGION=us-east-1`, test keys, the queue's URL, `WEBHOOK_ALLOW_PRIVATE_NETWORKS=true`.\n", len(firstStarts(r.Cold)))
		p("7. **Cost.** The 1,000-job runs of measurement 4, scaled to a million commands: Lambda requests = dispatch runs + push invocations; GB-seconds = each invocation's duration measured in-process, rounded up to 1 ms, × %s; SQS requests = SendMessageBatch calls counted at the stand-in + one ReceiveMessage and one DeleteMessageBatch per delivered batch (the event source mapping's empty polls are a fixed cost per queue, not per command, and are left out, as are the free tiers, EventBridge Scheduler and the $%.2f per secret per month); Secrets Manager = calls counted (with the cache on, real calls grow with containers × connections × TTL periods rather than with commands, so the scaled count holds only while that product stays at this run's share). The second cost row keeps every count and bills each push invocation for the warm batch time of measurement 2 instead. Prices, us-east-1, %s: Lambda $0.20 per million requests and $%.10f per GB-second (%s); SQS standard $0.40 per million requests; Secrets Manager $0.05 per 10,000 API calls (AWS's published list prices, kept in `bench/cost.go`).\n",
			r.Memory.Source, secretsManagerSecretUSD, pricesAsOf, r.Memory.gbSecondUSD(), r.Memory.Arch)
	}
	if r.Only == "throughput" {
		b.WriteString(throughputMethod(r.Throughput))
	}
	b.WriteString(installMarkdown(r.Install))
	b.WriteString(walMarkdown(r.WAL))
	b.WriteString(overloadMarkdown(r.Overload, r.Fair))
	b.WriteString(visibilityMarkdown(r.Visibility))
	b.WriteString(followersMarkdown(r.Followers))
	b.WriteString(commandTypesMarkdown(r.CommandTypes))
	b.WriteString(tokensMarkdown(r.Tokens))
	b.WriteString(churnMarkdown(r.Churn))
	b.WriteString(partsMarkdown(r.Parts))
	b.WriteString(batchLeverMarkdown(r.BatchLever))
	b.WriteString(poolerMarkdown(r.Pooler))
	return b.String()
}

// throughputMethod is how measurement 5 was taken (go run . -only
// throughput runs it alone).
func throughputMethod(tp throughputResult) string {
	return fmt.Sprintf("5. **Throughput.** The same number of jobs through each, one after the other, on fresh databases of the same cluster, each after an `ANALYZE` and a `CHECKPOINT`. Ours: one dispatcher running back to back (each run claims up to DISPATCH_MAX_PER_RUN = 5000 in batches of 50 and sends batches of 10, 5 at a time) into an in-process stand-in for SQS (a channel; no network), drained by %d push workers, each with its own `internal/app` (pool of 4 connections, as one Lambda container) taking up to 10 messages per invocation; %d connections of the sandbox provider, no latency, no credential reference (the secret path is measured in 4), a purchase order of %d lines per job, which the push worker loads (`purchaseorder.Command.Load`: one statement per push batch); the clock runs from the first dispatch to the last recorded batch, all rows then checked `completed`. A second, diagnostic run of ours on fresh rows dispatches every job before the consumers start, timing each stage alone. CPU is read from `/proc` (the cluster: postmaster, its reaped and live children) and `getrusage` (the Go process) at the start and end of each timed run; River's harness reads its own the same way. River: its own module (`bench/river`), River v0.51.2 with the settings of River's own benchmark (MaxWorkers 2,000, FetchCooldown 2 ms, FetchPollInterval 20 ms, InsertMany in batches of 5,000 before the client starts, pgxpool's default pool); the clock runs from `client.Start` to the last completed-job event, all rows then checked `completed`. River runs twice: with River's own no-op worker on an empty database, and with a purchase-order load worker on a migrated database seeded as ours (the same connections, purchase orders and lines; the outbox rows stay, unread): per job it runs the push worker's own load statement (its text handed over by the bench from `internal/purchaseorder`), with arrays of one element (the job's outbox id, organization, purchase order, its connection's location, the connection and its provider), decodes the row and fails the job when none comes back; it builds no provider document and records nothing beyond River's own completion. The PostgreSQL CPU per delivered command is each run's cluster CPU over its jobs. Statement families: `pg_stat_statements` (top-level entries of the run's database) is reset when each clock starts and read after the run; each statement is put in a family by a fragment of its text (ours: the dead-letter sweep, the claim with its setup, start, the purchase-order load, record; River's: `JobGetAvailable` fetching and locking jobs, `JobSetStateIfRunningMany` completing them, the purchase-order load); the rest (transaction control, set_config, River's leader election, notifications and maintenance) is other. Run alone with `go run . -only throughput -jobs 2000`.\n", tp.Consumers, throughputTenants, throughputLines)
}

func firstStarts(c []coldStart) []time.Duration {
	if len(c) == 0 {
		return nil
	}
	return c[0].Starts
}

// writeRaw writes every sample as JSON, for a closer look.
func (r *report) writeRaw(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
