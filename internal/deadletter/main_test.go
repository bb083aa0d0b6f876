package deadletter_test

import (
	"testing"

	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}
