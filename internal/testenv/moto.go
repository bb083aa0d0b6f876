package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Moto is a running moto_server: real SQS and Secrets Manager wire APIs.
type Moto struct {
	// URL is the endpoint to give the AWS SDK (AWS_ENDPOINT_URL).
	URL  string
	Port int

	cmd    *exec.Cmd
	exited chan struct{}
}

// StartMoto starts moto_server on a free loopback port. When
// TEST_AWS_ENDPOINT_URL is set it is used instead and nothing is started.
func StartMoto() (*Moto, error) {
	if url := os.Getenv("TEST_AWS_ENDPOINT_URL"); url != "" {
		return &Moto{URL: url}, nil
	}
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		return nil, fmt.Errorf("moto_server not found on PATH (make tools installs it into .venv): %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	m := &Moto{Port: port, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if err := m.start(bin); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Moto) start(bin string) error {
	m.exited = make(chan struct{})
	m.cmd = exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(m.Port))
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return fmt.Errorf("starting moto_server: %w", err)
	}
	exited := m.exited
	go func() { m.cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(m.URL + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("moto_server exited during start-up")
		default:
		}
		if time.Now().After(deadline) {
			m.Stop()
			return fmt.Errorf("moto_server did not answer within 30s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop kills moto_server. It may be started again with Restart.
func (m *Moto) Stop() {
	if m.cmd == nil {
		return
	}
	select {
	case <-m.exited:
		return
	default:
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(5 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
}

// Restart starts a stopped moto_server again on the same port (its state is
// gone: moto keeps everything in memory).
func (m *Moto) Restart() error {
	m.Stop()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		return fmt.Errorf("moto_server not found: %w", err)
	}
	return m.start(bin)
}

// AWSConfig returns an SDK config that talks to this moto_server with test
// credentials in us-east-1, retrying little so that fault tests stay quick.
func (m *Moto) AWSConfig() aws.Config {
	return aws.Config{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(m.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "testenv"}, nil
		}),
		RetryMaxAttempts: 2,
	}
}
