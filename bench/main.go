// Command bench runs every performance measurement side by side, in one run,
// on its own throwaway PostgreSQL and moto_server: claim scaling against the
// legacy worker's SQL (testdata/legacy_claim.sql), worker batch concurrency, statements per job, Secrets Manager
// calls, throughput against River, cold start and size of the bootstraps, and
// the cost per million commands derived from the counted requests. It prints
// one markdown table and writes it to results.md (raw samples go to
// results.raw).
//
// Run it from the bench folder: go run . (make bench).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// options bound one run. The defaults are the sizes results.md reports; smaller
// values are for trying the program out, not for results.
type options struct {
	out            string
	claimSizes     []int
	claimRuns      int
	followersRows  int
	throughputJobs int
	consumers      int
	coldStarts     int
	cpuProfile     string
	fairSizes      []int
	overloadRows   int
	overloadScale  float64
	installSizes   []int
	installRate    int
	installWindow  time.Duration
	wal            walOptions
	churnSizes     []int
	churnRate      int
	churnDuration  time.Duration
	churnLevers    churnLevers
	// only, when set, runs that one measurement ("install") and writes the
	// table only where -out says.
	only string
	// pgSettings are name=value settings the server starts with after the
	// test harness's own (-pg-setting, repeatable).
	pgSettings settingList
}

// aloneMeasurements are the measurements -only runs.
var aloneMeasurements = []string{"install", "fair", "wal", "churn", "parts", "claim", "batch", "followers", "commandtypes", "tokens", "throughput", "cold", "pooler"}

func main() {
	var (
		o            options
		sizes        string
		fairSizes    string
		installSizes string
		walSizes     string
		churnSizes   string
	)
	flag.StringVar(&o.out, "out", "results.md", "where to write the table (a results.raw beside it gets the raw samples)")
	flag.StringVar(&sizes, "claim-sizes", "10000,100000,1000000", "outbox sizes of the claim measurement")
	flag.IntVar(&o.claimRuns, "claim-runs", 30, "measured claims per size and variant")
	flag.IntVar(&o.followersRows, "followers-rows", followersRows, "rows of the fair load the followers measurement adds its backlog to")
	flag.IntVar(&o.throughputJobs, "jobs", 20000, "jobs of the throughput run, ours and each of River's")
	flag.IntVar(&o.consumers, "consumers", 10, "concurrent push consumers (Lambda containers) in our throughput run")
	flag.IntVar(&o.coldStarts, "cold-starts", 10, "cold starts per function under the emulator")
	flag.StringVar(&fairSizes, "fair-claim-sizes", "40000,1000000", "outbox sizes of the fair, capped claim (10,000 due across 1,000 organizations)")
	flag.IntVar(&o.overloadRows, "overload-rows", 50000, "rows of the overload backlog scenario (0: skip the overload scenarios)")
	flag.Float64Var(&o.overloadScale, "overload-scale", 0.03, "real time per simulated time in the overload scenarios")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the throughput measurement (ours and River's runs) to this file")
	flag.StringVar(&installSizes, "install-sizes", "1000000,10000000", "host outbox sizes of the live install measurement")
	flag.IntVar(&o.installRate, "install-rate", 50, "host inserts per second during the live install measurement")
	flag.DurationVar(&o.installWindow, "install-window", 10*time.Second, "how long the host's inserts run alone, for the reference")
	flag.StringVar(&walSizes, "wal-rows", "1000,20000,200000,2000000", "host outbox sizes of the WAL per host insert measurement")
	flag.IntVar(&o.wal.Inserts, "wal-inserts", 5000, "host inserts per schema in the WAL per host insert measurement")
	flag.BoolVar(&o.wal.KeyIndex, "wal-key-index", false, "also measure the host's inserts and the enqueue with the enqueue keeping its keys in the key index as before migration 25 (a lever, as -churn-key-index)")
	flag.StringVar(&o.wal.Payload, "wal-payload", "supplier", `the payload of the WAL measurement's host inserts: "supplier" (what the push worker reads of the command) or "order" (a whole purchase order)`)
	flag.StringVar(&churnSizes, "churn-sizes", "40000,1000000", "starting outbox sizes of the churn run (ours and the legacy worker at each)")
	flag.IntVar(&o.churnRate, "churn-rate", 200, "enqueues per second in the churn run")
	flag.IntVar(&o.churnLevers.Fillfactor, "churn-fillfactor", 0, "also run ours with the outbox's fillfactor set to this (a lever; 0: not run)")
	flag.BoolVar(&o.churnLevers.PlainInsert, "churn-plain-insert", false, "also run ours with the host inserting each command with the legacy host's plain INSERT instead of integration_outbox_enqueue (a lever)")
	flag.BoolVar(&o.churnLevers.KeyIndex, "churn-key-index", false, "also run ours with the enqueue keeping its keys in the outbox's unique key index as before migration 25 (a lever: the build before, in the same run)")
	flag.BoolVar(&o.churnLevers.RecordSQL, "churn-record-sql", false, "also run ours with every batch recorded by record.sql, as before record_completed.sql (a lever: the build before, in the same run)")
	flag.DurationVar(&o.churnDuration, "churn-duration", 3*time.Minute, "how long each churn variant runs, in turns it takes with the others at each size (30 s turns from 2 minutes up, quarters below)")
	flag.Var(&o.pgSettings, "pg-setting", "a name=value setting the PostgreSQL server starts with, after the harness's own (repeatable; a lever, e.g. pg_stat_statements.track=top)")
	flag.StringVar(&o.only, "only", "", `run only this measurement: "install", "fair" (the fair, capped claim), "wal" (WAL per host insert), "churn", "parts" (the churn's statements alone, one at a time), "claim" (the claim scaling), "followers" (the fair claim with a blocked backlog of one entity), "commandtypes" (the fair claim with push_supplier rows due beside the orders), "tokens" (OAuth2 token refreshes and Secrets Manager calls of a fleet), "batch" (our pipeline at push batches of 10 and 100), "cold" (bootstrap sizes and cold starts under the emulator), "pooler" (the claim and our pipeline directly and through PgBouncer in transaction mode) or "throughput" (measurement 5: ours against River's no-op and purchase-order load workers); the table goes to stdout, and to -out only when given`)
	flag.Parse()
	outGiven := false
	flag.Visit(func(f *flag.Flag) { outGiven = outGiven || f.Name == "out" })
	if o.only != "" && !slices.Contains(aloneMeasurements, o.only) {
		fmt.Fprintln(os.Stderr, `bench: -only: "install", "fair", "wal", "churn", "parts", "claim", "followers", "commandtypes", "tokens", "batch", "cold", "pooler" and "throughput" are the measurements that run alone`)
		os.Exit(2)
	}
	if o.only != "" && !outGiven {
		o.out = ""
	}
	var err error
	if o.claimSizes, err = parseSizes(sizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.fairSizes, err = parseSizes(fairSizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -fair-claim-sizes:", err)
		os.Exit(2)
	}
	if o.installSizes, err = parseInstallSizes(installSizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -install-sizes:", err)
		os.Exit(2)
	}
	if o.wal.Sizes, err = parseInstallSizes(walSizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -wal-rows:", err)
		os.Exit(2)
	}
	if _, ok := walPayloads[o.wal.Payload]; !ok {
		fmt.Fprintln(os.Stderr, `bench: -wal-payload: "supplier" or "order"`)
		os.Exit(2)
	}
	if o.churnSizes, err = parseInstallSizes(churnSizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -churn-sizes:", err)
		os.Exit(2)
	}
	if o.churnLevers.Fillfactor != 0 && (o.churnLevers.Fillfactor < 10 || o.churnLevers.Fillfactor > 100) {
		fmt.Fprintln(os.Stderr, "bench: -churn-fillfactor must be 0 or 10 to 100")
		os.Exit(2)
	}
	if o.churnRate < 1 || o.churnDuration < 4*time.Second {
		fmt.Fprintln(os.Stderr, "bench: -churn-rate must be at least 1 and -churn-duration at least 4s")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(ctx, log, o, os.Args); err != nil {
		log.Error("bench failed", "error", err.Error())
		stop()
		os.Exit(1)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		var n int
		// 1% due: a claim of 50 needs at least 5,000 rows.
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 100*claimLimit {
			return nil, fmt.Errorf("-claim-sizes: %q is not a size of at least %d", f, 100*claimLimit)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseInstallSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1000 {
			return nil, fmt.Errorf("%q is not a size of at least 1000", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// run builds what it needs, starts the servers, measures, and writes the
// table. A measurement that fails is reported in the table and fails the run
// at the end; the others still run.
func run(ctx context.Context, log *slog.Logger, o options, args []string) (err error) {
	began := time.Now()
	repo, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(repo, "go.mod")); err != nil {
		return fmt.Errorf("run the bench from the bench folder of the repository (cd bench && go run .): %w", err)
	}
	work, err := os.MkdirTemp("", "outbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	r := &report{Began: began, Machine: describeMachine(), Command: commandLine(args), Only: o.only}

	// Everything that compiles runs first, so no compiler competes with a
	// measurement for the two cores.
	arts := &artifacts{}
	switch o.only {
	case "", "cold":
		log.Info("building bootstraps, the River harness and the emulator")
		if arts, err = buildArtifacts(ctx, log, repo, work); err != nil {
			return err
		}
	case "throughput":
		log.Info("building the River harness")
		if arts.river, err = buildRiver(ctx, repo, work); err != nil {
			return err
		}
	}

	log.Info("starting PostgreSQL and moto_server")
	env, err := startEnv(ctx, work, o.pgSettings)
	if err != nil {
		return err
	}
	defer env.stop()

	var failed []error
	step := func(name string, f func() error) {
		if ctx.Err() != nil {
			return
		}
		t := time.Now()
		log.Info("measuring", "what", name)
		if err := f(); err != nil {
			log.Error("measurement failed", "what", name, "error", err.Error())
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", name, err))
			failed = append(failed, fmt.Errorf("%s: %w", name, err))
		}
		log.Info("measured", "what", name, "took", time.Since(t).Round(time.Millisecond))
	}
	if o.only == "" || o.only == "install" {
		step("live install", func() (err error) {
			r.Install, err = measureInstall(ctx, log, env, o.installSizes, o.installRate, o.installWindow)
			return
		})
	}
	if o.only == "" || o.only == "wal" {
		step("WAL per host insert", func() (err error) {
			r.WAL, err = measureWAL(ctx, log, env, o.wal)
			return
		})
	}
	if o.only == "fair" {
		step("fair claim scaling", func() (err error) { r.Fair, err = measureFairClaims(ctx, log, env, o.fairSizes, o.claimRuns); return })
		step("fair claim by all-visible share", func() (err error) {
			r.Visibility, err = measureVisibility(ctx, log, env, o.fairSizes[len(o.fairSizes)-1], o.claimRuns)
			return
		})
	}
	churn := func() {
		step("churn", func() (err error) {
			r.Churn, err = measureChurn(ctx, log, env, o.churnSizes, o.churnRate, o.churnDuration, o.churnLevers)
			return
		})
	}
	parts := func() {
		step("the churn's statements alone", func() error {
			p, err := measureParts(ctx, log, env)
			r.Parts = &p
			return err
		})
	}
	if o.only == "churn" {
		churn()
	}
	if o.only == "parts" {
		parts()
	}
	if o.only == "batch" {
		step("push batch lever", func() (err error) {
			r.BatchLever, err = measureBatchLever(ctx, log, env, o.throughputJobs, o.consumers)
			return
		})
	}
	if o.only == "claim" {
		step("claim scaling", func() (err error) { r.Claim, err = measureClaims(ctx, log, env, o.claimSizes, o.claimRuns); return })
	}
	followers := func() {
		step("claim with a blocked backlog", func() error {
			f, err := measureFollowers(ctx, log, env, o.followersRows, o.claimRuns)
			if err == nil {
				r.Followers = &f
			}
			return err
		})
	}
	if o.only == "followers" {
		followers()
	}
	commandTypes := func() {
		step("claim with two command types", func() error {
			c, err := measureCommandTypes(ctx, log, env, o.claimRuns)
			if err == nil {
				r.CommandTypes = &c
			}
			return err
		})
	}
	if o.only == "commandtypes" {
		commandTypes()
	}
	tokens := func() {
		step("OAuth2 tokens across a fleet", func() error {
			t, err := measureTokens(ctx, log, env)
			if err == nil {
				r.Tokens = &t
			}
			return err
		})
	}
	if o.only == "tokens" {
		tokens()
	}
	throughput := func() {
		step("throughput", func() (err error) {
			if o.cpuProfile != "" {
				stopProfile, err := startCPUProfile(o.cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			r.Throughput, err = measureThroughput(ctx, log, env, arts.river, o.throughputJobs, o.consumers)
			return
		})
	}
	if o.only == "throughput" {
		throughput()
	}
	cold := func() {
		step("cold start", func() (err error) {
			r.Cold, err = measureColdStarts(ctx, log, env, arts, o.coldStarts)
			return
		})
		r.Sizes = arts.sizes
		r.Memory = templateMemory(repo)
	}
	if o.only == "cold" {
		cold()
	}
	if o.only == "pooler" {
		step("behind a transaction pooler", func() error {
			p, err := measurePooler(ctx, log, env, o.claimRuns, o.throughputJobs, o.consumers)
			r.Pooler = &p
			return err
		})
	}
	if o.only != "" {
		return finish(ctx, log, r, o, began, failed)
	}
	step("claim scaling", func() (err error) { r.Claim, err = measureClaims(ctx, log, env, o.claimSizes, o.claimRuns); return })
	step("fair claim scaling", func() (err error) { r.Fair, err = measureFairClaims(ctx, log, env, o.fairSizes, o.claimRuns); return })
	step("fair claim by all-visible share", func() (err error) {
		r.Visibility, err = measureVisibility(ctx, log, env, o.fairSizes[len(o.fairSizes)-1], o.claimRuns)
		return
	})
	followers()
	commandTypes()
	tokens()
	if o.overloadRows > 0 {
		step("overload scenarios", func() (err error) {
			r.Overload, err = measureOverload(ctx, log, env, o.overloadRows, o.overloadScale)
			return
		})
	}
	churn()
	parts()
	step("worker batch", func() (err error) { r.Worker, err = measureWorker(ctx, env); return })
	step("secret calls, cache on", func() (err error) { r.CacheOn, err = measurePipeline(ctx, env, cacheOn); return })
	step("secret calls, cache off", func() (err error) { r.CacheOff, err = measurePipeline(ctx, env, cacheOff); return })
	throughput()
	cold()
	return finish(ctx, log, r, o, began, failed)
}

// finish prints the table and writes it, with the raw samples, to o.out
// (nowhere when o.out is empty).
func finish(ctx context.Context, log *slog.Logger, r *report, o options, began time.Time, failed []error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	r.Took = time.Since(began)
	table := r.markdown()
	fmt.Print(table)
	if o.out == "" {
		return errors.Join(failed...)
	}
	if err := os.WriteFile(o.out, []byte(table), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", o.out, err)
	}
	raw := strings.TrimSuffix(o.out, filepath.Ext(o.out)) + ".raw"
	if err := r.writeRaw(raw); err != nil {
		return fmt.Errorf("writing %s: %w", raw, err)
	}
	log.Info("done", "table", o.out, "raw", raw, "took", r.Took.Round(time.Second))
	return errors.Join(failed...)
}

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func commandLine(args []string) string {
	if len(args) <= 1 {
		return "make bench (cd bench && go run .)"
	}
	return "cd bench && go run . " + strings.Join(args[1:], " ")
}

// settingList is a repeatable name=value flag.
type settingList []string

func (l *settingList) String() string { return strings.Join(*l, " ") }

func (l *settingList) Set(v string) error {
	if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
		return fmt.Errorf("%q is not name=value", v)
	}
	*l = append(*l, v)
	return nil
}
