package lambdatest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sync/errgroup"

	"integration-outbox/internal/testenv"
)

// rieModule is the emulator the Makefile pins (RIE_VERSION); keep them equal.
const rieModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

const awsRegion = "us-east-1"

var (
	repoRoot string
	pg       *testenv.Postgres
	moto     *testenv.Moto
	sqsc     *sqs.Client
	smc      *secretsmanager.Client
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto),
		testenv.WithSetup(setup), testenv.WithCleanup(builds.cleanup))
}

// setup finds the repository and builds the clients the tests share.
func setup() error {
	var err error
	if repoRoot, err = findRepoRoot(); err != nil {
		return err
	}
	cfg := aws.Config{
		Region: awsRegion,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "lambdatest"}, nil
		}),
		BaseEndpoint: aws.String(moto.URL),
	}
	sqsc = sqs.NewFromConfig(cfg)
	smc = secretsmanager.NewFromConfig(cfg)
	return nil
}

// findRepoRoot is the directory of the main module's go.mod.
func findRepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the integration-outbox module")
	}
	return filepath.Dir(gomod), nil
}

// functionEnv is what every function gets under the emulator: the local
// stand-ins and test credentials, as infra/env.json gives `sam local`.
func functionEnv(databaseURL, queueURL string) map[string]string {
	return map[string]string{
		"DATABASE_URL":                   databaseURL,
		"AWS_ENDPOINT_URL":               moto.URL,
		"AWS_REGION":                     awsRegion,
		"AWS_DEFAULT_REGION":             awsRegion,
		"AWS_ACCESS_KEY_ID":              "test",
		"AWS_SECRET_ACCESS_KEY":          "test",
		"PUSH_PURCHASE_ORDER_QUEUE_URL":  queueURL,
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
		"SANDBOX_PROVIDER_ENABLED":       "true",
		"CREDENTIAL_REFERENCE_PREFIX":    "integrations/",
		"LOG_LEVEL":                      "info",
	}
}

// ---------------------------------------------------------------- bootstraps

// bootstrapBuilds builds every function's bootstrap once per test run, all
// at once, so that no build runs while a first invoke is being timed.
type bootstrapBuilds struct {
	once sync.Once
	dir  string
	err  error
}

var builds bootstrapBuilds

// bootstrap returns the path of the real bootstrap of functions/<folder>,
// built for this machine as `make build` builds it for Lambda.
func bootstrap(t *testing.T, folder string) string {
	t.Helper()
	builds.once.Do(builds.buildAll)
	if builds.err != nil {
		t.Fatalf("building the bootstraps: %v", builds.err)
	}
	path := filepath.Join(builds.dir, folder, "bootstrap")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no bootstrap for functions/%s: %v", folder, err)
	}
	return path
}

func (b *bootstrapBuilds) buildAll() {
	b.dir, b.err = os.MkdirTemp("", "lambdatest-bootstraps-")
	if b.err != nil {
		return
	}
	folders, err := functionFolders()
	if err != nil {
		b.err = err
		return
	}
	var g errgroup.Group
	for _, folder := range folders {
		g.Go(func() error {
			out := filepath.Join(b.dir, folder, "bootstrap")
			cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w",
				"-o", out, "./functions/"+folder)
			cmd.Dir = repoRoot
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
			if msg, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go build ./functions/%s: %w\n%s", folder, err, msg)
			}
			return nil
		})
	}
	start := time.Now()
	b.err = g.Wait()
	if b.err == nil {
		fmt.Fprintf(os.Stderr, "lambdatest: built %d bootstraps (linux/%s) in %s\n", len(folders), runtime.GOARCH,
			time.Since(start).Round(time.Millisecond))
	}
}

func (b *bootstrapBuilds) cleanup() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// functionFolders lists the folders under functions/: each is one Lambda.
func functionFolders() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(repoRoot, "functions"))
	if err != nil {
		return nil, err
	}
	var folders []string
	for _, e := range entries {
		if e.IsDir() {
			folders = append(folders, e.Name())
		}
	}
	if len(folders) == 0 {
		return nil, fmt.Errorf("no function folders under %s/functions", repoRoot)
	}
	return folders, nil
}

// ---------------------------------------------------------------- emulator binary

var (
	rieOnce sync.Once
	riePath string
	rieErr  error
)

// emulatorBinary finds aws-lambda-rie: $AWS_LAMBDA_RIE, else bin/ under the
// repository root (make tools), else a go install into a temporary GOBIN.
func emulatorBinary(t *testing.T) string {
	t.Helper()
	rieOnce.Do(func() {
		if p := os.Getenv("AWS_LAMBDA_RIE"); p != "" {
			if _, err := os.Stat(p); err != nil {
				rieErr = fmt.Errorf("AWS_LAMBDA_RIE=%s: %w", p, err)
			}
			riePath = p
			return
		}
		if p := filepath.Join(repoRoot, "bin", "aws-lambda-rie"); isExecutable(p) {
			riePath = p
			return
		}
		dir, err := os.MkdirTemp("", "lambdatest-rie-")
		if err != nil {
			rieErr = err
			return
		}
		cmd := exec.Command("go", "install", rieModule)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			rieErr = fmt.Errorf("aws-lambda-rie is not in bin/ and go install failed (run make tools): %w\n%s", err, out)
			return
		}
		riePath = filepath.Join(dir, "aws-lambda-rie")
	})
	if rieErr != nil {
		t.Fatal(rieErr)
	}
	return riePath
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// ---------------------------------------------------------------- AWS fixtures

// createQueue creates a fresh SQS queue in moto and returns its URL.
func createQueue(t *testing.T, name string) string {
	t.Helper()
	return testenv.CreateQueue(t, sqsc, map[string]string{"VisibilityTimeout": "360"})
}
