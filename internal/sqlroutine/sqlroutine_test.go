package sqlroutine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, testenv.WithPostgres(&pg)) }

// connect returns a connection to a fresh database holding a table whose
// column names are the names a routine's result columns and parameters
// could take (column_1, id), so that a mix-up between them would show.
func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `create table item (id int primary key, column_1 text, note text);
		insert into item values (1, 'a', 'x'), (2, 'b', 'y'), (3, 'c', null)`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// The statements of the tests: an update returning rows (a data-modifying
// statement through RETURN QUERY), two result columns named alike, a
// named argument used twice, and a statement that ends in a comment.
var (
	touch = sqlroutine.New("test/touch", `with u as (
    update item set note = coalesce(note, '') || @suffix::text
    where id = any(@ids::int[]) and column_1 <> @skip::text
    returning id, column_1, note)
select u.id, u.column_1, coalesce(u.note, ''), coalesce(@suffix::text, '') from u order by u.id
-- a trailing comment`, sqlroutine.Setting{Name: "jit", Value: "off"})
	count = sqlroutine.New("test/count", `select count(*) as column_1 from item where note is not null and id > @above::int`)
)

func TestArgsFollowTheirFirstUse(t *testing.T) {
	got := touch.Args(pgx.NamedArgs{"ids": []int{1}, "skip": "z", "suffix": "!"})
	if len(got) != 3 || got[0] != "!" || got[2] != "z" {
		t.Fatalf("Args = %v, want [suffix ids skip] in that order", got)
	}
	if !strings.HasPrefix(touch.Routine(), sqlroutine.Prefix+"test_touch_") || len(touch.Routine()) > 63 {
		t.Errorf("routine name %q", touch.Routine())
	}
	again := sqlroutine.New("test/touch", touch.SQL)
	if again.Routine() == touch.Routine() {
		t.Errorf("the same statement with other settings has the same routine name %s", again.Routine())
	}
	if sqlroutine.New("test/touch", touch.SQL, touch.Settings...).Routine() != touch.Routine() {
		t.Errorf("the routine name is not a function of the statement and its settings")
	}
}

// TestARoutineAnswersAsThePlainStatement: the same statement, plain and
// through its routine, on two copies of the same rows, writes the same and
// returns the same rows; its setting holds inside the routine only; the
// catalog sends the plain statement until the routine is installed.
func TestARoutineAnswersAsThePlainStatement(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	var told [][]string
	notify := func(statements []string) { told = append(told, statements) }
	cat := sqlroutine.NewCatalog(touch, count).Notify(notify)
	args := pgx.NamedArgs{"ids": []int{1, 2, 3}, "skip": "b", "suffix": "!"}

	run := func() [][]any {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		rows, err := cat.Query(ctx, tx, touch, args)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := cat.QueryRow(ctx, tx, count, pgx.NamedArgs{"above": 0}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return append(got, []any{n})
	}
	plain := run()
	if len(told) != 1 || strings.Join(told[0], ",") != "test/touch,test/count" {
		t.Errorf("the catalog told %v of the missing routines, want one notice naming both statements", told)
	}
	if ok, err := cat.Present(ctx, conn, touch); err != nil || ok {
		t.Fatalf("Present before Install = %v, %v; want false", ok, err)
	}
	n, err := sqlroutine.Install(ctx, conn, []*sqlroutine.Statement{touch, count})
	if err != nil || n != 2 {
		t.Fatalf("Install = %d, %v; want 2 routines", n, err)
	}
	if n, err := sqlroutine.Install(ctx, conn, []*sqlroutine.Statement{touch, count}); err != nil || n != 0 {
		t.Fatalf("Install again = %d, %v; want nothing to do", n, err)
	}
	// The catalog read before the install keeps sending the plain
	// statement until Recheck has passed.
	if ok, _ := cat.Present(ctx, conn, touch); ok {
		t.Fatal("the catalog read the database again before Recheck")
	}
	fresh := sqlroutine.NewCatalog(touch, count).Notify(notify)
	cat = fresh
	if ok, err := cat.Present(ctx, conn, touch); err != nil || !ok {
		t.Fatalf("Present after Install = %v, %v", ok, err)
	}
	routine := run()
	if len(told) != 1 {
		t.Errorf("the catalog told of missing routines after Install: %v", told)
	}
	if len(plain) != 3 || len(routine) != len(plain) {
		t.Fatalf("rows plain %v, through the routine %v", plain, routine)
	}
	for i := range plain {
		for j := range plain[i] {
			if plain[i][j] != routine[i][j] {
				t.Errorf("row %d column %d: plain %v, routine %v", i, j, plain[i][j], routine[i][j])
			}
		}
	}
	var jit, config string
	if err := conn.QueryRow(ctx, `select current_setting('jit'), array_to_string(proconfig, ',') from pg_proc where proname = $1`,
		touch.Routine()).Scan(&jit, &config); err != nil {
		t.Fatal(err)
	}
	if jit != "on" || !strings.HasSuffix(config, ",jit=off") || !strings.Contains(config, "search_path=") {
		t.Errorf("session jit %q (want the server's on), routine's settings %q (want its search_path and jit=off)", jit, config)
	}
	if problems, err := sqlroutine.Check(ctx, conn, []*sqlroutine.Statement{touch, count}); err != nil || len(problems) > 0 {
		t.Errorf("Check after Install = %v, %v; want nothing", problems, err)
	}
}

// TestCheckAndTheCatalogNoticeADroppedOrOutdatedRoutine: a routine dropped
// after the catalog read it fails its call once and the catalog sends the
// plain statement after that; Check names a missing routine and one made
// for another column type.
func TestCheckAndTheCatalogNoticeADroppedOrOutdatedRoutine(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	stmts := []*sqlroutine.Statement{touch, count}
	if _, err := sqlroutine.Install(ctx, conn, stmts); err != nil {
		t.Fatal(err)
	}
	cat := sqlroutine.NewCatalog(stmts...)
	var n int64
	if err := cat.QueryRow(ctx, conn, count, pgx.NamedArgs{"above": 1}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count through its routine = %d, %v; want 1", n, err)
	}
	if _, err := conn.Exec(ctx, "drop function "+count.Routine()); err != nil {
		t.Fatal(err)
	}
	if err := cat.QueryRow(ctx, conn, count, pgx.NamedArgs{"above": 1}).Scan(&n); err == nil {
		t.Fatal("the call of a dropped routine did not fail: this test could not see the catalog learn it")
	}
	if err := cat.QueryRow(ctx, conn, count, pgx.NamedArgs{"above": 1}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count after its routine was dropped = %d, %v; want the plain statement's 1", n, err)
	}
	problems, err := sqlroutine.Check(ctx, conn, stmts)
	if err != nil || len(problems) != 1 || problems[0].Statement != "test/count" || !strings.Contains(problems[0].Reason, "missing") {
		t.Fatalf("Check with count's routine dropped = %v, %v", problems, err)
	}
	// The host makes item.id a bigint: touch's routine returns int.
	if _, err := conn.Exec(ctx, "alter table item alter column id type bigint"); err != nil {
		t.Fatal(err)
	}
	problems, err = sqlroutine.Check(ctx, conn, stmts[:1])
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0].Reason, "other column types") {
		t.Fatalf("Check after a column type changed = %v, %v", problems, err)
	}
	// Its call fails once (the statement no longer matches the routine's
	// result), then the catalog sends the plain statement, which works.
	touchArgs := pgx.NamedArgs{"ids": []int{1}, "skip": "z", "suffix": "!"}
	call := func() error {
		rows, err := cat.Query(ctx, conn, touch, touchArgs)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}
	if err := call(); err == nil {
		t.Fatal("the outdated routine answered: this test could not see the fallback")
	}
	if err := call(); err != nil {
		t.Fatalf("the plain statement after the outdated routine failed: %v", err)
	}
	// make migrate makes it anew.
	if n, err := sqlroutine.Install(ctx, conn, stmts); err != nil || n != 2 {
		t.Fatalf("Install after the type change = %d, %v; want touch's remade and count's made", n, err)
	}
	if problems, err := sqlroutine.Check(ctx, conn, stmts); err != nil || len(problems) > 0 {
		t.Fatalf("Check after Install = %v, %v", problems, err)
	}
}

// TestInstallDropsOnlyOtherBuildsOldRoutines: another build's routine
// installed 8 days ago is dropped, one installed today is kept (the
// containers of the build being replaced still call it).
func TestInstallDropsOnlyOtherBuildsOldRoutines(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	oldBuild := sqlroutine.New("test/count", count.SQL+" and true")
	newerBuild := sqlroutine.New("test/count", count.SQL+" and 1 = 1")
	if _, err := sqlroutine.Install(ctx, conn, []*sqlroutine.Statement{oldBuild, newerBuild}); err != nil {
		t.Fatal(err)
	}
	stale := time.Now().Add(-8 * 24 * time.Hour).UTC().Format(time.RFC3339)
	if _, err := conn.Exec(ctx, "comment on function "+oldBuild.Routine()+" is 'integration-outbox statement test/count, installed "+stale+"'"); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlroutine.Install(ctx, conn, []*sqlroutine.Statement{count}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{oldBuild.Routine(): false, newerBuild.Routine(): true, count.Routine(): true} {
		var exists bool
		if err := conn.QueryRow(ctx, "select to_regproc($1) is not null", name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != want {
			t.Errorf("routine %s exists: %v, want %v", name, exists, want)
		}
	}
	if _, err := conn.Exec(ctx, sqlroutine.DropAllSQL); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := conn.QueryRow(ctx, `select count(*) from pg_proc where proname like 'integration\_outbox\_sql\_%'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("routines left after DropAllSQL: %d, %v", left, err)
	}
}
