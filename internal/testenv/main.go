package testenv

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// Main is the TestMain of every package whose tests start servers or
// goroutines:
//
//	var pg *testenv.Postgres
//
//	func TestMain(m *testing.M) { testenv.Main(m, testenv.WithPostgres(&pg)) }
//
// It starts the servers the options ask for, runs the tests, stops every
// server it or an OnDemand started (also when a start, a set-up step or
// m.Run fails or panics in this goroutine; a test that panics kills the
// process, and with it the servers, which die with their parent), then, if
// the tests passed, fails the run if they left a goroutine running
// (goleak). A server that cannot start ends the run with exit code 1 and
// the reason on stderr.
func Main(m *testing.M, opts ...Option) {
	os.Exit(runMain(m, opts))
}

// Option says what Main starts, sets up and tolerates.
type Option func(*mainConfig)

type mainConfig struct {
	postgres []**Postgres
	moto     []**Moto
	onDemand []*OnDemand
	setup    []func() error
	cleanup  []func()
}

// WithPostgres starts one throwaway cluster before the tests and stores it
// in *dst.
func WithPostgres(dst **Postgres) Option {
	return func(c *mainConfig) { c.postgres = append(c.postgres, dst) }
}

// WithMoto starts one moto_server before the tests and stores it in *dst.
func WithMoto(dst **Moto) Option {
	return func(c *mainConfig) { c.moto = append(c.moto, dst) }
}

// WithOnDemand stops, after the tests, the servers s started for them.
func WithOnDemand(s *OnDemand) Option {
	return func(c *mainConfig) { c.onDemand = append(c.onDemand, s) }
}

// WithSetup runs fn once the servers are up, before the tests; an error
// ends the run with exit code 1.
func WithSetup(fn func() error) Option {
	return func(c *mainConfig) { c.setup = append(c.setup, fn) }
}

// WithCleanup runs fn after the tests, before the servers stop.
func WithCleanup(fn func()) Option {
	return func(c *mainConfig) { c.cleanup = append(c.cleanup, fn) }
}

func runMain(m *testing.M, opts []Option) int {
	var c mainConfig
	for _, o := range opts {
		o(&c)
	}
	code := runWithServers(m, &c)
	if code != 0 {
		return code
	}
	// Keep-alive connections of clients built on the default transport
	// would idle until their timeout; those of the servers just stopped
	// have been closed by their peer.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: goroutines still running after the tests:", err)
		return 1
	}
	return 0
}

// runWithServers starts the servers, runs the set-up steps, the tests and
// the clean-ups, and stops every server on the way out.
func runWithServers(m *testing.M, c *mainConfig) int {
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	for _, s := range c.onDemand {
		stops = append(stops, s.stop)
	}
	for _, dst := range c.postgres {
		pg, err := StartPostgres()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv: starting PostgreSQL:", err)
			return 1
		}
		*dst = pg
		stops = append(stops, pg.Stop)
	}
	for _, dst := range c.moto {
		moto, err := StartMoto()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv: starting moto_server:", err)
			return 1
		}
		*dst = moto
		stops = append(stops, moto.Stop)
	}
	for _, fn := range c.setup {
		if err := fn(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: setting up the tests:", err)
			return 1
		}
	}
	stops = append(stops, c.cleanup...)
	return m.Run()
}

// OnDemand holds the servers of a test binary whose tests do not all need
// them: the first test that asks starts one, later tests share it, and Main
// (WithOnDemand) stops it. Tests of pure logic and fuzz targets then run
// without any server.
type OnDemand struct {
	mu   sync.Mutex
	pg   *Postgres
	moto *Moto
	// errors of a failed start, given to every later test too.
	pgErr, motoErr error
}

// Postgres returns the shared cluster, starting it on first use; the test
// fails if it cannot start.
func (s *OnDemand) Postgres(t testing.TB) *Postgres {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pg == nil && s.pgErr == nil {
		s.pg, s.pgErr = StartPostgres()
	}
	if s.pgErr != nil {
		t.Fatalf("starting PostgreSQL: %v", s.pgErr)
	}
	return s.pg
}

// Moto returns the shared moto_server, starting it on first use; the test
// fails if it cannot start.
func (s *OnDemand) Moto(t testing.TB) *Moto {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moto == nil && s.motoErr == nil {
		s.moto, s.motoErr = StartMoto()
	}
	if s.motoErr != nil {
		t.Fatalf("starting moto_server: %v", s.motoErr)
	}
	return s.moto
}

func (s *OnDemand) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moto != nil {
		s.moto.Stop()
	}
	if s.pg != nil {
		s.pg.Stop()
	}
}

// OwnPostgres starts a cluster for this test alone, one it may stop and
// restart while the shared one stays up; it is stopped when the test ends.
// The test is skipped when TEST_DATABASE_URL is set (no server of its own).
func OwnPostgres(t testing.TB) *Postgres {
	t.Helper()
	pg, err := StartPostgres()
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v", err)
	}
	t.Cleanup(pg.Stop)
	if pg.DataDir == "" {
		t.Skip("TEST_DATABASE_URL is set: this test needs a server it can stop")
	}
	return pg
}

// OwnMoto starts a moto_server for this test alone, one it may stop and
// restart while the shared one stays up; it is stopped when the test ends.
// The test is skipped when TEST_AWS_ENDPOINT_URL is set (no server of its
// own).
func OwnMoto(t testing.TB) *Moto {
	t.Helper()
	m, err := StartMoto()
	if err != nil {
		t.Fatalf("starting moto_server: %v", err)
	}
	t.Cleanup(m.Stop)
	if m.Port == 0 {
		t.Skip("TEST_AWS_ENDPOINT_URL is set: this test needs a moto_server it can stop")
	}
	return m
}
