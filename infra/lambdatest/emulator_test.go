package lambdatest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"integration-outbox/internal/testenv"
)

// emulator is one aws-lambda-rie process serving one bootstrap, as a Lambda
// execution environment does: the first invoke starts (inits) the function,
// later ones reuse it.
type emulator struct {
	name   string
	url    string
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}

	started time.Time
	// Listening is process start → the emulator accepting connections.
	Listening time.Duration
	// FirstInvoke is process start → first response (the emulator's own
	// start, the function's cold start and its first invocation).
	FirstInvoke time.Duration
	invoked     bool
	addr        string
}

// startEmulator starts aws-lambda-rie on loopback ports with the function's
// environment (and nothing else from the test process's).
func startEmulator(t *testing.T, name, bootstrapPath string, env map[string]string) *emulator {
	t.Helper()
	rie := emulatorBinary(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	apiPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := &emulator{
		name:   name,
		addr:   "127.0.0.1:" + strconv.Itoa(port),
		url:    fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port),
		logs:   &syncBuffer{},
		exited: make(chan struct{}),
	}
	// --runtime-api-address too: its default (127.0.0.1:9001) is fixed, and
	// two emulators (or two test packages) would fight over it.
	e.cmd = exec.Command(rie, "--log-level", "info",
		"--runtime-interface-emulator-address", "127.0.0.1:"+strconv.Itoa(port),
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(apiPort),
		bootstrapPath)
	e.cmd.Dir = filepath.Dir(bootstrapPath)
	e.cmd.Env = emulatorEnv(name, env)
	e.cmd.Stdout, e.cmd.Stderr = e.logs, e.logs
	// The kernel kills the emulator if the test process dies; the emulator's
	// runtime (the bootstrap) then loses its runtime API and exits.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	e.started = time.Now()
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", rie, err)
	}
	go func() { e.cmd.Wait(); close(e.exited) }()
	t.Cleanup(func() {
		e.stop()
		if t.Failed() {
			t.Logf("%s emulator and function output:\n%s", name, e.logs.String())
		}
	})
	return e
}

func emulatorEnv(name string, env map[string]string) []string {
	out := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"TMPDIR=" + os.TempDir(),
		"AWS_LAMBDA_FUNCTION_NAME=" + name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"AWS_LAMBDA_FUNCTION_TIMEOUT=60", // every function's Timeout in template.yaml
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// stop kills the function process (the emulator starts it in its own
// process group) and then the emulator.
func (e *emulator) stop() {
	select {
	case <-e.exited:
		return
	default:
	}
	for _, pid := range childPIDs(e.cmd.Process.Pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
	}
}

// childPIDs reads the children of pid from /proc.
func childPIDs(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(field); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// invocation is one emulator response.
type invocation struct {
	Status int
	Body   []byte
	Took   time.Duration
}

// FunctionError is the errorMessage of a function error (the emulator
// answers 200 with {"errorMessage","errorType"}, or 502 when the runtime
// crashed), or "".
func (inv invocation) FunctionError() string {
	var e struct {
		ErrorMessage *string `json:"errorMessage"`
		ErrorType    string  `json:"errorType"`
	}
	if json.Unmarshal(inv.Body, &e) == nil && e.ErrorMessage != nil {
		return fmt.Sprintf("%s: %s", e.ErrorType, *e.ErrorMessage)
	}
	if inv.Status != http.StatusOK {
		return fmt.Sprintf("HTTP %d: %s", inv.Status, inv.Body)
	}
	return ""
}

var invokeClient = &http.Client{Timeout: 90 * time.Second}

// invoke posts payload as the Lambda service would. The first call waits
// for the emulator to listen (that wait is part of the first invoke's
// latency).
func (e *emulator) invoke(t *testing.T, payload []byte) invocation {
	t.Helper()
	start := time.Now()
	if !e.invoked {
		e.awaitListening(t)
	}
	resp, err := invokeClient.Post(e.url, "application/json", bytes.NewReader(payload))
	if err != nil {
		t.Fatalf("%s: invoking: %v\n%s", e.name, err, e.logs.String())
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: reading the response: %v", e.name, err)
	}
	now := time.Now()
	if !e.invoked {
		e.invoked = true
		e.FirstInvoke = now.Sub(e.started)
	}
	return invocation{Status: resp.StatusCode, Body: body, Took: now.Sub(start)}
}

// awaitListening dials until the emulator accepts connections.
func (e *emulator) awaitListening(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", e.addr, time.Second)
		if err == nil {
			conn.Close()
			e.Listening = time.Since(e.started)
			return
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			t.Fatalf("%s: the emulator does not listen on %s: %v\n%s", e.name, e.addr, err, e.logs.String())
		}
		select {
		case <-e.exited:
			t.Fatalf("%s: the emulator exited before it listened:\n%s", e.name, e.logs.String())
		case <-time.After(time.Millisecond):
		}
	}
}

var (
	initReportRE   = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	invokeReportRE = regexp.MustCompile(`REPORT RequestId: \S+\s+(?:Init Duration: [0-9.]+ ms\s+)?Duration: ([0-9.]+) ms`)
)

// InitDuration is the function's init phase as the emulator reports it.
func (e *emulator) InitDuration() string { return reportedMillis(initReportRE, e.logs.String()) }

// FirstDuration is the first invocation's duration as the emulator reports it.
func (e *emulator) FirstDuration() string { return reportedMillis(invokeReportRE, e.logs.String()) }

func reportedMillis(re *regexp.Regexp, logs string) string {
	m := re.FindStringSubmatch(logs)
	if m == nil {
		return "?"
	}
	ms, _ := strconv.ParseFloat(m[1], 64)
	return fmt.Sprintf("%.1fms", ms)
}

// syncBuffer collects output written from several goroutines.
type syncBuffer = testenv.Buffer

// ---------------------------------------------------------------- events

// eventFile is one functions/<folder>/events/*.json.
type eventFile struct {
	Name    string
	Payload []byte
}

// events reads every sample event of a function folder, sorted by name.
func events(t *testing.T, folder string) []eventFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "functions", folder, "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("functions/%s/events has no *.json", folder)
	}
	sort.Strings(paths)
	var out []eventFile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Fatalf("%s is not valid JSON", p)
		}
		out = append(out, eventFile{Name: filepath.Base(p), Payload: b})
	}
	return out
}

// logFirstInvoke records the cold-start figure of a function.
func logFirstInvoke(t *testing.T, e *emulator, bootstrapPath, event string) {
	t.Helper()
	// The emulator prints its REPORT line as it answers; give the pipe a
	// moment to deliver it.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if invokeReportRE.MatchString(e.logs.String()) {
			break
		}
	}
	size := int64(-1)
	if fi, err := os.Stat(bootstrapPath); err == nil {
		size = fi.Size()
	}
	t.Logf("%s: first invoke (emulator process start → first response, event %s): %s "+
		"[emulator listening after %s; function init %s; first invocation %s]; bootstrap %.1f MiB (linux/%s)",
		e.name, event, e.FirstInvoke.Round(100*time.Microsecond), e.Listening.Round(100*time.Microsecond),
		e.InitDuration(), e.FirstDuration(), float64(size)/(1<<20), runtime.GOARCH)
}
