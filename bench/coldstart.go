package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"integration-outbox/internal/testenv"
)

// rieVersion is the Lambda Runtime Interface Emulator the bench installs
// when the repository's bin/ has none.
const rieVersion = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// minimalFunction names the reference bootstrap in the tables.
const minimalFunction = "minimal aws-lambda-go function"

// artifacts is what the run builds before it measures anything.
type artifacts struct {
	repo  string
	river string
	rie   string
	sizes []bootstrapSize
	// amd64 maps a function (and minimalFunction) to its amd64 bootstrap.
	amd64 map[string]string
}

// bootstrapSize is measurement 6's size part for one function.
type bootstrapSize struct {
	Function     string
	Arm64, Amd64 int64
	// Err says why the function did not build (it is then skipped).
	Err string
}

// buildArtifacts builds every functions/* bootstrap for arm64 and amd64 with
// the production flags, the minimal reference function, the River harness,
// and finds or installs the emulator.
func buildArtifacts(ctx context.Context, log *slog.Logger, repo, work string) (*artifacts, error) {
	a := &artifacts{repo: repo, amd64: map[string]string{}}
	entries, err := os.ReadDir(filepath.Join(repo, "functions"))
	if err != nil {
		return nil, err
	}
	type target struct{ name, dir, pkg string }
	var targets []target
	for _, e := range entries {
		if e.IsDir() {
			targets = append(targets, target{e.Name(), repo, "./functions/" + e.Name()})
		}
	}
	targets = append(targets, target{minimalFunction, filepath.Join(repo, "bench"), "./minimal-lambda"})
	for _, t := range targets {
		s := bootstrapSize{Function: t.name}
		for _, arch := range []string{"arm64", "amd64"} {
			out := filepath.Join(work, "functions", strings.ReplaceAll(t.name, " ", "-")+"-"+arch, "bootstrap")
			err := goCommand(ctx, t.dir, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch},
				"build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, t.pkg)
			if err != nil {
				s.Err = err.Error()
				log.Warn("function does not build; skipped", "function", t.name, "arch", arch, "error", s.Err)
				break
			}
			st, err := os.Stat(out)
			if err != nil {
				return nil, err
			}
			if arch == "arm64" {
				s.Arm64 = st.Size()
			} else {
				s.Amd64 = st.Size()
				a.amd64[t.name] = out
			}
		}
		a.sizes = append(a.sizes, s)
	}

	if a.river, err = buildRiver(ctx, repo, work); err != nil {
		return nil, err
	}

	a.rie = filepath.Join(repo, "bin", "aws-lambda-rie")
	if _, err := os.Stat(a.rie); err != nil {
		gobin := filepath.Join(work, "bin")
		if err := goCommand(ctx, work, []string{"GOBIN=" + gobin}, "install", rieVersion); err != nil {
			return nil, fmt.Errorf("installing the Lambda Runtime Interface Emulator: %w", err)
		}
		a.rie = filepath.Join(gobin, "aws-lambda-rie")
	}
	return a, nil
}

// buildRiver builds the River harness (bench/river) into work.
func buildRiver(ctx context.Context, repo, work string) (string, error) {
	bin := filepath.Join(work, "river-bench")
	if err := goCommand(ctx, filepath.Join(repo, "bench", "river"), nil, "build", "-o", bin, "."); err != nil {
		return "", fmt.Errorf("building the River harness: %w", err)
	}
	return bin, nil
}

// goCommand runs the go tool in dir with extra environment.
func goCommand(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, first)
	}
	return nil
}

// coldStart is measurement 6's start-up part for one function (amd64, under
// the emulator).
type coldStart struct {
	Function string
	// Starts is each cold invocation's time from the POST to the emulator
	// (which then starts the bootstrap process) to the response.
	Starts []time.Duration
	// Inits are the emulator's INIT REPORT durations (bootstrap start to its
	// first request for work), in ms.
	Inits []float64
	// PeakRSS is each bootstrap's VmHWM in KiB after its first response.
	PeakRSS []int64
	// FunctionError is the error a response carried, if any.
	FunctionError string
}

// pushProbe is one push record whose claim does not exist: the handler
// starts nothing, acknowledges it, and has touched the database once.
const pushProbe = `{"Records":[{"messageId":"cold-start","eventSource":"aws:sqs","body":` +
	`"{\"outboxId\":\"00000000-0000-4000-8000-000000000001\",\"organizationId\":\"00000000-0000-4000-8000-000000000002\",` +
	`\"connectionId\":\"00000000-0000-4000-8000-000000000003\",\"commandType\":\"push_purchase_order\",` +
	`\"claimToken\":\"00000000-0000-4000-8000-000000000004\"}"}]}`

// coldEvent is the first event a function gets: dispatch {} (an empty
// outbox), push a record of a claim that does not exist, any other function
// its first events/*.json sample or {}.
func coldEvent(repo, function string) []byte {
	switch function {
	case "dispatch", minimalFunction:
		return []byte(`{}`)
	case "push-purchase-order":
		return []byte(pushProbe)
	}
	samples, _ := filepath.Glob(filepath.Join(repo, "functions", function, "events", "*.json"))
	slices.Sort(samples)
	if len(samples) > 0 {
		if b, err := os.ReadFile(samples[0]); err == nil {
			return b
		}
	}
	return []byte(`{}`)
}

// measureColdStarts starts each amd64 bootstrap n times, each time in a
// fresh emulator, the functions taking turns.
func measureColdStarts(ctx context.Context, log *slog.Logger, env *benchEnv, a *artifacts, n int) ([]coldStart, error) {
	url, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	var names []string
	for _, s := range a.sizes {
		if _, ok := a.amd64[s.Function]; ok {
			names = append(names, s.Function)
		}
	}
	fenv := env.functionEnv(url)
	out := make([]coldStart, len(names))
	for i, name := range names {
		out[i].Function = name
	}
	for range n {
		for i, name := range names {
			r, err := coldStartOnce(ctx, a.rie, a.amd64[name], fenv, coldEvent(a.repo, name))
			if err != nil {
				return out, fmt.Errorf("%s: %w", name, err)
			}
			out[i].Starts = append(out[i].Starts, r.took)
			out[i].PeakRSS = append(out[i].PeakRSS, r.hwmKiB)
			if r.initMs > 0 {
				out[i].Inits = append(out[i].Inits, r.initMs)
			}
			if r.fnErr != "" {
				out[i].FunctionError = r.fnErr
			}
		}
	}
	for _, c := range out {
		log.Info("cold starts measured", "function", c.Function, "median", median(c.Starts))
	}
	return out, nil
}

type coldResult struct {
	took   time.Duration
	initMs float64
	hwmKiB int64
	fnErr  string
}

// syncBuffer collects output written from several goroutines.
type syncBuffer = testenv.Buffer

// initReportRE reads the emulator's own measure of the init phase: from the
// bootstrap's start to its first request for work.
var initReportRE = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// coldStartOnce starts the emulator on loopback ports with bootstrap, waits
// until it listens (the emulator starts the bootstrap only on the first
// invoke), then times one invoke, reads the bootstrap's peak RSS and stops
// both processes.
func coldStartOnce(ctx context.Context, rie, bootstrap string, fenv map[string]string, event []byte) (coldResult, error) {
	var res coldResult
	port, err := testenv.FreePort()
	if err != nil {
		return res, err
	}
	apiPort, err := testenv.FreePort()
	if err != nil {
		return res, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(apiPort), "--log-level", "info", bootstrap)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"AWS_LAMBDA_FUNCTION_TIMEOUT=30", "AWS_LAMBDA_FUNCTION_NAME=" + filepath.Base(filepath.Dir(bootstrap))}
	for k, v := range fenv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var output syncBuffer
	cmd.Stdout, cmd.Stderr = &output, &output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("starting the emulator: %w", err)
	}
	var child int
	defer func() {
		if child == 0 {
			child = childOf(cmd.Process.Pid)
		}
		if child > 0 {
			syscall.Kill(child, syscall.SIGKILL) // the emulator puts it in its own process group
		}
		cmd.Process.Kill()
		cmd.Wait()
	}()

	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return res, fmt.Errorf("the emulator did not listen on %s: %s", addr, output.String())
		}
		time.Sleep(5 * time.Millisecond)
	}

	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ictx, http.MethodPost,
		"http://"+addr+"/2015-03-31/functions/function/invocations", bytes.NewReader(event))
	if err != nil {
		return res, err
	}
	began := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, fmt.Errorf("invoking: %w: %s", err, output.String())
	}
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	res.took = time.Since(began)
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("the emulator answered %s: %s %s", resp.Status, body.String(), output.String())
	}
	if strings.Contains(body.String(), `"errorMessage"`) {
		res.fnErr = body.String()
	}
	if child = childOf(cmd.Process.Pid); child > 0 {
		res.hwmKiB = peakRSS(child)
	}
	for range 100 { // the emulator may log after it answered
		if m := initReportRE.FindStringSubmatch(output.String()); m != nil {
			res.initMs, _ = strconv.ParseFloat(m[1], 64)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res.hwmKiB == 0 {
		return res, errors.New("could not find the bootstrap process to read its peak RSS")
	}
	return res, nil
}

// childOf returns the pid of a child of pid, or 0.
func childOf(pid int) int {
	if c := childrenOf(pid); len(c) > 0 {
		return c[0]
	}
	return 0
}

// peakRSS reads VmHWM (KiB) of pid.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
