package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncerBin is where Debian installs pgbouncer. PGBOUNCER_BIN overrides it.
const PgBouncerBin = "/usr/sbin/pgbouncer"

// PgBouncerOptions configure StartPgBouncer; the zero value is a
// transaction-mode pooler with two server connections per database/user pair.
type PgBouncerOptions struct {
	// PoolMode is "session", "transaction" (the default) or "statement".
	PoolMode string
	// DefaultPoolSize is the number of server connections per
	// database/user pair (default 2), kept small so that tests see clients
	// share them.
	DefaultPoolSize int
	// MaxClientConn is the number of client connections accepted
	// (default 200).
	MaxClientConn int
	// Users may log in besides "postgres" (auth_type=trust still needs
	// them listed in the auth_file). The server is logged in to with the
	// same name, so each must also be a role there.
	Users []string
}

// PgBouncer is a running pgbouncer in front of a test-started cluster, with
// the settings pgbouncer ships with except for those PgBouncerOptions name
// (in particular no ignore_startup_parameters, and no prepared statement
// support: 1.18 has none). Every database name is passed through to the
// cluster, so a database from CreateDatabase or MigratedDatabase is reached
// with URLFor(its name).
//
// In transaction mode a client's named prepared statements stay on the
// server connection that prepared them, which the next transaction may not
// get: pgx's default statement cache (QueryExecModeCacheStatement) then
// fails with SQLSTATE 26000, so clients set DefaultQueryExecMode to
// QueryExecModeExec or QueryExecModeSimpleProtocol.
type PgBouncer struct {
	// URL connects as postgres to the "postgres" database through the pooler.
	URL  string
	Port int

	cmd      *exec.Cmd
	dir      string
	exited   chan struct{}
	stopOnce sync.Once
}

// StartPgBouncer starts pgbouncer on a free loopback port in front of pg,
// which must be a cluster testenv started (its port known): with
// TEST_DATABASE_URL there is no port to point pgbouncer at.
func StartPgBouncer(pg *Postgres, opt PgBouncerOptions) (*PgBouncer, error) {
	if pg == nil || pg.Port == 0 {
		return nil, fmt.Errorf("pgbouncer needs the test-started PostgreSQL server (its port is unknown with TEST_DATABASE_URL)")
	}
	host := "127.0.0.1"
	if cfg, err := pgx.ParseConfig(pg.URL); err == nil && cfg.Host != "" {
		host = cfg.Host
	}
	bin := PgBouncerBin
	if v := os.Getenv("PGBOUNCER_BIN"); v != "" {
		bin = v
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("pgbouncer not found at %s (install with: apt-get install -y pgbouncer, or make tools; or set PGBOUNCER_BIN): %w", bin, err)
	}
	if opt.PoolMode == "" {
		opt.PoolMode = "transaction"
	}
	if opt.DefaultPoolSize == 0 {
		opt.DefaultPoolSize = 2
	}
	if opt.MaxClientConn == 0 {
		opt.MaxClientConn = 200
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("creating pgbouncer temp dir: %w", err)
	}
	b := &PgBouncer{Port: port, dir: dir, exited: make(chan struct{})}
	if err := b.start(bin, host, pg.Port, opt); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

func (b *PgBouncer) start(bin, host string, pgPort int, opt PgBouncerOptions) error {
	var creds *syscall.Credential
	if os.Geteuid() == 0 { // pgbouncer refuses root: run it as postgres, like the server.
		var err error
		if creds, err = userCredential("postgres"); err != nil {
			return err
		}
		if err := os.Chown(b.dir, int(creds.Uid), int(creds.Gid)); err != nil {
			return fmt.Errorf("chown pgbouncer temp dir: %w", err)
		}
	}
	// With auth_type=trust no password is checked, but a user missing from
	// the auth_file is still refused.
	var users strings.Builder
	for _, u := range append([]string{"postgres"}, opt.Users...) {
		fmt.Fprintf(&users, "%s \"\"\n", quoteAuthFile(u))
	}
	authFile := filepath.Join(b.dir, "userlist.txt")
	iniFile := filepath.Join(b.dir, "pgbouncer.ini")
	logFile := filepath.Join(b.dir, "pgbouncer.log")
	// "*" is the fallback database: any name a client asks for goes to the
	// same server. unix_socket_dir is empty so no socket is created outside
	// the temp dir (Debian's default is /var/run/postgresql).
	ini := strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%d", host, pgPort),
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.Port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + authFile,
		"pool_mode = " + opt.PoolMode,
		"default_pool_size = " + strconv.Itoa(opt.DefaultPoolSize),
		"max_client_conn = " + strconv.Itoa(opt.MaxClientConn),
		"logfile = " + logFile,
		"pidfile = " + filepath.Join(b.dir, "pgbouncer.pid"),
		"",
	}, "\n")
	for name, content := range map[string]string{authFile: users.String(), iniFile: ini} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", filepath.Base(name), err)
		}
	}
	// In the foreground (no -d) it is our child: Stop waits for it, and the
	// kernel kills it if the test process dies first (SIGKILL: it holds
	// nothing a clean shutdown would save, and 1.18 has no handler for the
	// SIGQUIT the server gets).
	b.cmd = exec.Command(bin, iniFile)
	b.cmd.Dir = b.dir
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: creds}
	b.cmd.Env = append(os.Environ(), "LC_ALL=C")
	// In the foreground it also logs to stderr: keep that too, for the
	// errors it meets before it opens its logfile (a bad setting).
	stderr, err := os.Create(filepath.Join(b.dir, "stderr.log"))
	if err != nil {
		return fmt.Errorf("creating pgbouncer stderr log: %w", err)
	}
	b.cmd.Stdout, b.cmd.Stderr = stderr, stderr
	if err := b.cmd.Start(); err != nil {
		stderr.Close()
		return fmt.Errorf("starting pgbouncer: %w", err)
	}
	exited := b.exited
	go func() { b.cmd.Wait(); stderr.Close(); close(exited) }()
	b.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", b.Port)
	// A login completes only once pgbouncer has a server connection for the
	// pool, so this also checks the way through to the cluster.
	gone, err := awaitLogin(b.URL, exited, 10*time.Second)
	switch {
	case gone:
		return fmt.Errorf("pgbouncer exited during start-up: %s", b.logTail())
	case err != nil:
		b.stop()
		return fmt.Errorf("pgbouncer did not accept connections within 10s: %w; its log ends:\n%s", err, b.logTail())
	}
	return nil
}

// URLFor returns URL with the database name replaced: pgbouncer passes any
// name through to the cluster.
func (b *PgBouncer) URLFor(database string) string { return ReplaceDatabase(b.URL, database) }

// Stop shuts pgbouncer down and removes its directory; calling it again
// does nothing.
func (b *PgBouncer) Stop() {
	b.stopOnce.Do(func() {
		b.stop()
		os.RemoveAll(b.dir)
	})
}

// stop sends SIGTERM, an immediate shutdown in 1.18 (clients cut off, no
// waiting for their transactions as SIGINT would). From 1.23 SIGTERM waits
// for the clients to leave, hence the SIGKILL after a while.
func (b *PgBouncer) stop() {
	select {
	case <-b.exited:
		return
	default:
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill()
		<-b.exited
	}
}

// logTail returns the end of pgbouncer's output: its stderr, which holds
// everything it logs in the foreground, or else its logfile.
func (b *PgBouncer) logTail() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "stderr.log"))
	if len(out) == 0 {
		out, _ = os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	}
	const limit = 4000
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return string(out)
}

// quoteAuthFile quotes a user name for pgbouncer's auth_file, which doubles
// the double quotes inside.
func quoteAuthFile(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
