package testenv_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/testenv"
)

// helperEnv makes this test binary, run again by a test, play a package
// whose TestMain is testenv.Main in the situation the variable names.
const helperEnv = "TESTENV_MAIN_HELPER"

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "postgres-fails", "panic":
		testenv.Main(m, testenv.WithPostgres(&pg))
	default:
		testenv.Main(m)
	}
}

// A goroutine the tests leave running fails the run (helper mode "leak").
func TestHelperLeaks(t *testing.T) {
	if os.Getenv(helperEnv) != "leak" {
		t.Skip("run by TestMainFailsOnALeakedGoroutine")
	}
	block := make(chan struct{})
	go func() { <-block }()
}

// A test that panics kills the process (helper mode "panic").
func TestHelperPanics(t *testing.T) {
	if os.Getenv(helperEnv) != "panic" {
		t.Skip("run by TestServersDieWithAPanickingTest")
	}
	fmt.Printf("PGDIR=%s\nPGPORT=%d\n", filepath.Dir(pg.DataDir), pg.Port)
	panic("a test panics")
}

// runHelper runs this test binary again in a helper mode and returns its
// exit code and output.
func runHelper(t *testing.T, mode, run string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		exit, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running the helper: %v", err)
		}
		code = exit.ExitCode()
	}
	return code, string(out)
}

func TestMainFailsOnALeakedGoroutine(t *testing.T) {
	t.Parallel()
	code, out := runHelper(t, "leak", "TestHelperLeaks")
	if code != 1 || !strings.Contains(out, "goroutines still running after the tests") || !strings.Contains(out, "TestHelperLeaks") {
		t.Fatalf("exit %d, output:\n%s\nwant exit 1 naming the leaked goroutine", code, out)
	}
}

func TestMainExitsWhenAServerCannotStart(t *testing.T) {
	t.Parallel()
	code, out := runHelper(t, "postgres-fails", "TestNothing", "PG_BIN_DIR=/nonexistent", "TEST_DATABASE_URL=")
	if code != 1 || !strings.Contains(out, "testenv: starting PostgreSQL") || !strings.Contains(out, "/nonexistent") {
		t.Fatalf("exit %d, output:\n%s\nwant exit 1 saying why PostgreSQL did not start", code, out)
	}
	if strings.Contains(out, "TestNothing ran") {
		t.Error("the tests ran without their server")
	}
}

// The servers Main started die with the test process, even when a test
// panics and no deferred stop runs.
func TestServersDieWithAPanickingTest(t *testing.T) {
	t.Parallel()
	code, out := runHelper(t, "panic", "TestHelperPanics", "TEST_DATABASE_URL=")
	_, port, ok := strings.Cut(out, "PGPORT=")
	port, _, _ = strings.Cut(port, "\n")
	if code == 0 || !ok || !strings.Contains(out, "a test panics") {
		t.Fatalf("exit %d, output:\n%s\nwant the helper to start PostgreSQL and panic", code, out)
	}
	// No deferred Stop ran: remove the cluster's directory here.
	if _, dir, ok := strings.Cut(out, "PGDIR="); ok {
		dir, _, _ = strings.Cut(dir, "\n")
		if strings.HasPrefix(filepath.Base(dir), "outbox-pg-") {
			t.Cleanup(func() { os.RemoveAll(dir) })
		}
	}
	for range 100 {
		conn, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			return // refused: the server is gone
		}
		conn.Close()
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("PostgreSQL on port %s still accepts connections after its test process died", port)
}

func TestNothing(t *testing.T) { t.Log("TestNothing ran") }

func TestReceiverRecordsAndAnswers(t *testing.T) {
	t.Parallel()
	rc := testenv.NewReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		var body struct{ Order string }
		_ = json.NewDecoder(r.Body).Decode(&body) // the answer can read the body the receiver recorded
		w.Header().Set("X-N", strings.Repeat("n", n))
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(body.Order))
	})
	for _, order := range []string{"PO-1", "PO-2"} {
		req, _ := http.NewRequest(http.MethodPost, rc.URL+"/orders?x=1", strings.NewReader(`{"order":"`+order+`"}`))
		req.Header.Set("Idempotency-Key", "key-"+order)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 16)
		n, _ := resp.Body.Read(got)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(got[:n]) != order {
			t.Errorf("answer %d %q, want 201 %q", resp.StatusCode, got[:n], order)
		}
	}
	if rc.Calls() != 2 {
		t.Errorf("Calls() = %d, want 2", rc.Calls())
	}
	reqs := rc.Requests()
	if len(reqs) != 2 || reqs[1].Method != http.MethodPost || reqs[1].URI != "/orders?x=1" ||
		reqs[1].Body["order"] != "PO-2" || string(reqs[1].Raw) != `{"order":"PO-2"}` {
		t.Errorf("requests %+v", reqs)
	}
	if keys := rc.Keys(); strings.Join(keys, ",") != "key-PO-1,key-PO-2" {
		t.Errorf("Keys() = %v", keys)
	}
}
