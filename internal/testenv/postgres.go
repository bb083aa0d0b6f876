// Package testenv starts the real servers the integration tests run against: a
// throwaway PostgreSQL cluster and a moto_server, both children of the test
// process on 127.0.0.1 and free ports, stopped when the tests end (and killed by
// the kernel if the test process dies first).
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBinDir is where Debian installs the PostgreSQL 15 server binaries.
// PG_BIN_DIR overrides it.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// Postgres is a running throwaway cluster.
type Postgres struct {
	// URL connects as the superuser to the "postgres" database.
	URL     string
	Port    int
	DataDir string
	BinDir  string
	// Settings are name=value settings given to the server after the
	// defaults (the later wins), from its next start (Restart).
	Settings []string

	cmd    *exec.Cmd
	dir    string
	creds  *syscall.Credential
	dbSeq  atomic.Int64
	exited chan struct{}
}

// StartPostgres initialises a cluster in a fresh temporary directory and starts
// it on a free loopback port. When TEST_DATABASE_URL is set it is used instead
// and nothing is started (Stop is then a no-op).
func StartPostgres() (*Postgres, error) {
	if url := os.Getenv("TEST_DATABASE_URL"); url != "" {
		return &Postgres{URL: url}, nil
	}
	binDir := PostgresBinDir
	if v := os.Getenv("PG_BIN_DIR"); v != "" {
		binDir = v
	}
	if _, err := os.Stat(filepath.Join(binDir, "initdb")); err != nil {
		return nil, fmt.Errorf("postgres server binaries not found in %s (install with: apt-get install -y postgresql-15, or set PG_BIN_DIR): %w", binDir, err)
	}
	dir, err := os.MkdirTemp("", "outbox-pg-")
	if err != nil {
		return nil, fmt.Errorf("creating postgres temp dir: %w", err)
	}
	p := &Postgres{dir: dir, DataDir: filepath.Join(dir, "data"), BinDir: binDir, exited: make(chan struct{})}
	if os.Geteuid() == 0 { // initdb refuses root: run the server as the postgres user.
		creds, err := userCredential("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		p.creds = creds
		if err := os.Chown(dir, int(creds.Uid), int(creds.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("chown postgres temp dir: %w", err)
		}
	}
	initdb := p.command(filepath.Join(binDir, "initdb"), "-D", p.DataDir, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := p.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *Postgres) start() error {
	if p.Port == 0 {
		port, err := FreePort()
		if err != nil {
			return err
		}
		p.Port = port
	}
	p.exited = make(chan struct{})
	args := []string{"-D", p.DataDir,
		"-c", "listen_addresses=127.0.0.1", "-c", "port=" + strconv.Itoa(p.Port),
		"-c", "unix_socket_directories=" + p.dir, "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_preload_libraries=pg_stat_statements",
		"-c", "pg_stat_statements.track=all"}
	for _, setting := range p.Settings {
		args = append(args, "-c", setting)
	}
	p.cmd = p.command(filepath.Join(p.BinDir, "postgres"), args...)
	logFile, err := os.Create(filepath.Join(p.dir, "postgres.log"))
	if err != nil {
		return fmt.Errorf("creating postgres log: %w", err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting postgres: %w", err)
	}
	exited := p.exited
	go func() { p.cmd.Wait(); logFile.Close(); close(exited) }()
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
	gone, err := awaitLogin(p.URL, exited, 30*time.Second)
	switch {
	case gone:
		log, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
		return fmt.Errorf("postgres exited during start-up: %s", log)
	case err != nil:
		p.kill(syscall.SIGKILL)
		return fmt.Errorf("postgres did not accept connections within 30s: %w", err)
	}
	return nil
}

// awaitLogin waits until a login at url succeeds (nil), the server
// started for it exits (gone), or within has passed (the last login's
// error).
func awaitLogin(url string, exited <-chan struct{}, within time.Duration) (gone bool, err error) {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, url)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return false, nil
		}
		select {
		case <-exited:
			return true, err
		default:
		}
		if time.Now().After(deadline) {
			return false, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart stops the server the hard way (like pg_ctl stop -m immediate: no
// shutdown checkpoint, clients cut off) and starts it again on the same port.
func (p *Postgres) Restart() error {
	if err := p.StopImmediate(); err != nil {
		return err
	}
	return p.start()
}

// StopImmediate kills the server as pg_ctl stop -m immediate would (SIGQUIT).
func (p *Postgres) StopImmediate() error {
	if p.cmd == nil {
		return fmt.Errorf("postgres was not started by testenv")
	}
	p.kill(syscall.SIGQUIT)
	return nil
}

// Start starts a server stopped by StopImmediate again on the same port.
func (p *Postgres) Start() error { return p.start() }

// Stop shuts the server down and removes its directory.
func (p *Postgres) Stop() {
	if p.cmd == nil {
		return
	}
	p.kill(syscall.SIGINT) // fast shutdown
	os.RemoveAll(p.dir)
}

func (p *Postgres) kill(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// CreateDatabase creates a fresh, empty database and returns its URL.
func (p *Postgres) CreateDatabase(ctx context.Context, template string) (string, error) {
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), p.dbSeq.Add(1))
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		return "", fmt.Errorf("connecting to create database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stmt := "create database " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " template " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return ReplaceDatabase(p.URL, name), nil
}

// ReplaceDatabase returns url with its database name replaced.
func ReplaceDatabase(url, name string) string {
	q := ""
	if i := strings.Index(url, "?"); i >= 0 {
		url, q = url[:i], url[i:]
	}
	i := strings.LastIndex(url, "/")
	return url[:i+1] + name + q
}

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT, Credential: p.creds}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func userCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("looking up user %q to run postgres as (initdb refuses root): %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
