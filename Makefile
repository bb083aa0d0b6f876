# integration-outbox: build, test, lint and run the Lambda bundle.
# `make help` lists the targets. Everything runs from the repository root.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

# Lambda architecture of the bootstraps: arm64 (the template's) or amd64.
ARCH ?= arm64
GO ?= go

# Every folder under functions/ is one Lambda (build/<folder>/bootstrap).
FUNCTIONS := $(patsubst functions/%/,%,$(wildcard functions/*/))
BOOTSTRAPS := $(FUNCTIONS:%=build/%/bootstrap)
ZIPS := $(FUNCTIONS:%=build/%.zip)

GO_BUILD_FLAGS := -tags lambda.norpc -trimpath -ldflags='-s -w'

# Pinned tools, fetched from the Go module proxy.
RIE_MODULE := github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
RIE := $(CURDIR)/bin/aws-lambda-rie
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# squawk, the migration linter, from the npm registry into a project-local
# directory (its configuration, with each rule we ignore and why: .squawk.toml).
SQUAWK_VERSION := 2.66.0
SQUAWK_DIR := bin/squawk-$(SQUAWK_VERSION)
SQUAWK := $(SQUAWK_DIR)/node_modules/.bin/squawk
# Ory Hydra, a real OAuth2 server whose rotated refresh tokens can stay
# usable for a grace period: the credential tests run a container dying
# mid-refresh against it (they skip without it).
HYDRA_MODULE := github.com/ory/hydra/v2
HYDRA_VERSION := v2.3.0
HYDRA := bin/hydra

# Local stand-ins the integration tests start (see internal/testenv).
PG_BIN_DIR ?= /usr/lib/postgresql/15/bin
VENV := $(CURDIR)/.venv
# A moto_server installed by `make tools` into .venv is found by the tests.
export PATH := $(VENV)/bin:$(PATH)

# Other Go modules in this repository (bench/ and bench/river have their own go.mod).
SUBMODULES := $(patsubst %/go.mod,%,$(wildcard */go.mod */*/go.mod))

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_%-]+:.*?## ' $(MAKEFILE_LIST) \
		| awk 'BEGIN {FS = ":.*?## "}; {printf "  %-22s %s\n", $$1, $$2}'

## ---------------------------------------------------------------- tools

.PHONY: tools
tools: $(RIE) $(SQUAWK) $(HYDRA) postgres-server pgbouncer-server moto-server ## Install aws-lambda-rie, squawk and hydra into ./bin; check PostgreSQL 15, pgbouncer and moto_server

# squawk-cli pinned, installed with npm under bin/squawk-<version>.
$(SQUAWK):
	@command -v npm >/dev/null || { echo "squawk: npm is missing; install Node.js (apt-get install -y nodejs npm)"; exit 1; }
	npm install --prefix $(SQUAWK_DIR) --no-save --no-audit --no-fund --loglevel=error squawk-cli@$(SQUAWK_VERSION)

# bin/aws-lambda-rie links to a file named after the version, so changing
# RIE_VERSION installs the new one.
$(RIE): bin/aws-lambda-rie-$(RIE_VERSION)
	ln -sfn $(notdir $<) $@
bin/aws-lambda-rie-$(RIE_VERSION):
	@rm -rf bin/.install && mkdir -p bin/.install
	GOBIN=$(CURDIR)/bin/.install $(GO) install $(RIE_MODULE)@$(RIE_VERSION)
	mv bin/.install/aws-lambda-rie $@ && rm -rf bin/.install

# Hydra's go.mod replaces its API client with a folder its module zip
# leaves out, so `go install` refuses it: build it from a copy of the
# module without that replace (the published client of the same version).
$(HYDRA): bin/hydra-$(HYDRA_VERSION)
	ln -sfn $(notdir $<) $@
bin/hydra-$(HYDRA_VERSION):
	@rm -rf bin/.hydra && mkdir -p bin/.hydra
	dir=$$($(GO) mod download -json $(HYDRA_MODULE)@$(HYDRA_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	cp -r "$$dir" bin/.hydra/src
	chmod -R u+w bin/.hydra/src
	sed -i '\|=> ./internal/httpclient|d' bin/.hydra/src/go.mod
	cd bin/.hydra/src && CGO_ENABLED=0 GOFLAGS=-mod=mod $(GO) build -trimpath -o $(CURDIR)/$@ .
	rm -rf bin/.hydra

.PHONY: postgres-server
postgres-server:
	@if [ -x "$(PG_BIN_DIR)/initdb" ]; then \
		echo "postgres: $(PG_BIN_DIR)/initdb found"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "postgres: installing postgresql-15 with apt-get"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15; \
	else \
		echo "postgres: $(PG_BIN_DIR)/initdb is missing; install the server binaries with:"; \
		echo "  sudo apt-get update && sudo apt-get install -y postgresql-15"; \
		echo "(or point PG_BIN_DIR at another PostgreSQL 15 bin directory)"; \
		exit 1; \
	fi

# pgbouncer, the pooler the tests put in front of the throwaway cluster
# (internal/testenv/pgbouncer.go), from apt like the server.
.PHONY: pgbouncer-server
pgbouncer-server:
	@if [ -x /usr/sbin/pgbouncer ]; then \
		echo "pgbouncer: /usr/sbin/pgbouncer found"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "pgbouncer: installing pgbouncer with apt-get"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer; \
	else \
		echo "pgbouncer: /usr/sbin/pgbouncer is missing; install it with:"; \
		echo "  sudo apt-get update && sudo apt-get install -y pgbouncer"; \
		echo "(or point PGBOUNCER_BIN at another pgbouncer binary when running the tests)"; \
		exit 1; \
	fi

# moto_server: the one on PATH, else a project-local .venv. pip only runs when
# moto_server is missing and PyPI answers; otherwise print the command.
.PHONY: moto-server
moto-server:
	@if command -v moto_server >/dev/null; then \
		echo "moto: $$(command -v moto_server) found"; \
	elif python3 -c 'import urllib.request as u; u.urlopen("https://pypi.org/simple/moto/", timeout=5)' 2>/dev/null; then \
		echo "moto: installing moto[server] into $(VENV)"; \
		python3 -m venv "$(VENV)" && "$(VENV)/bin/pip" install --quiet 'moto[server]'; \
	else \
		echo "moto: moto_server is missing and PyPI is not reachable from here; install it with:"; \
		echo "  python3 -m venv .venv && .venv/bin/pip install 'moto[server]'"; \
		exit 1; \
	fi

## ---------------------------------------------------------------- build

.PHONY: build
build: $(BOOTSTRAPS) ## Build build/<function>/bootstrap for every functions/* folder (ARCH=arm64|amd64)

# FORCE: go build decides what is stale (the Go build cache makes an
# unchanged rebuild cheap), and a different ARCH always relinks.
build/%/bootstrap: FORCE
	@mkdir -p $(@D)
	GOOS=linux GOARCH=$(ARCH) CGO_ENABLED=0 $(GO) build $(GO_BUILD_FLAGS) -o $@ ./functions/$*
	@echo "$(ARCH)" > $(@D)/ARCH

.PHONY: package
package: $(ZIPS) ## Zip each bootstrap into build/<function>.zip (deployable as-is)

build/%.zip: build/%/bootstrap
	@rm -f $@
	cd build/$* && touch -d '2000-01-01T00:00:00Z' bootstrap && zip -X -q ../$*.zip bootstrap
	@echo "$@ ($$(cat build/$*/ARCH), $$(stat -c %s $@) bytes)"

# `sam build` (BuildMethod: makefile) runs build-<LogicalId> with ARTIFACTS_DIR.
# The map from logical id to folder must match template.yaml's CodeUri.
.PHONY: build-DispatchFunction build-PushPurchaseOrderFunction build-PushSupplierFunction build-RerunFunction build-InspectFunction build-RetentionFunction build-ReleaseDeadLettersFunction
build-DispatchFunction: build/dispatch/bootstrap
	$(sam-artifact)
build-PushPurchaseOrderFunction: build/push-purchase-order/bootstrap
	$(sam-artifact)
build-PushSupplierFunction: build/push-supplier/bootstrap
	$(sam-artifact)
build-RerunFunction: build/rerun/bootstrap
	$(sam-artifact)
build-InspectFunction: build/inspect/bootstrap
	$(sam-artifact)
build-RetentionFunction: build/retention/bootstrap
	$(sam-artifact)
build-ReleaseDeadLettersFunction: build/release-dead-letters/bootstrap
	$(sam-artifact)

define sam-artifact
@test -n "$(ARTIFACTS_DIR)" || { echo "$@: ARTIFACTS_DIR is not set (sam build sets it)"; exit 1; }
cp $< $(ARTIFACTS_DIR)/bootstrap
endef

## ---------------------------------------------------------------- test

.PHONY: test
test: tools ## Run every test (-race), with real Postgres, moto_server and the Lambda runtime emulator
	AWS_LAMBDA_RIE=$(RIE) $(GO) test -race -count=1 ./...
	@for m in $(SUBMODULES); do echo "test: module $$m"; (cd $$m && $(GO) test -count=1 ./...) || exit 1; done

# Every Fuzz target of the module, FUZZTIME each (their seeds also run in
# `make test`). Discovered from the sources, so a new target is fuzzed too.
# A target that fails only with the fuzzer's own "context deadline exceeded"
# as FUZZTIME ends, having written no failing input, is a hiccup of the
# fuzzing engine on a loaded machine, not a finding: it runs once more, and
# a second failure of any kind fails the run.
FUZZTIME ?= 3s
.PHONY: fuzz
fuzz: ## Run every fuzz target briefly (FUZZTIME=3s each)
	@grep -rlE '^func Fuzz' --include='*_test.go' internal | sort | while read -r f; do \
		dir=./$$(dirname "$$f"); \
		for t in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]+)\(.*/\1/p' "$$f"); do \
			echo "fuzz: $$dir $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) "$$dir" >/tmp/fuzz-$$t.log 2>&1 && continue; \
			if grep -q 'context deadline exceeded' /tmp/fuzz-$$t.log && ! grep -q 'Failing input written' /tmp/fuzz-$$t.log; then \
				echo "fuzz: $$dir $$t: the fuzzer timed out at the end of its run with no failing input; running it once more"; \
				$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) "$$dir" >/tmp/fuzz-$$t.log 2>&1 && continue; \
			fi; \
			cat /tmp/fuzz-$$t.log; exit 1; \
		done; \
	done

.PHONY: test-stress
test-stress: ## Run the stress tests (build tag stress)
	$(GO) test -race -count=1 -run Stress -tags stress ./...

.PHONY: lint
lint: $(SQUAWK) ## gofmt, go vet, staticcheck, go mod tidy check, squawk over migrations/*.sql, cfn-lint
	@unformatted=$$(gofmt -l $$(find . -name '*.go' -not -path './.venv/*' -not -path './build/*' -not -path './.aws-sam/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) mod tidy -diff
	@for m in $(SUBMODULES); do \
		echo "lint: module $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) mod tidy -diff) || exit 1; \
	done
	$(SQUAWK) --config .squawk.toml migrations/*.sql
	cfn-lint template.yaml

## ---------------------------------------------------------------- run

.PHONY: migrate
migrate: ## Apply migrations/ to the database DATABASE_URL names
	$(GO) run ./infra/migrate

.PHONY: demo
demo: postgres-server moto-server ## The whole pipeline on this machine: throwaway Postgres + moto, real handlers, printed summary
	$(GO) run ./infra/demo

.PHONY: bench
bench: postgres-server moto-server ## Benchmarks (bench/ is its own Go module)
	cd bench && $(GO) run .

.PHONY: clean
clean: ## Remove build outputs (build/, .aws-sam/); keeps bin/ and .venv/
	rm -rf build .aws-sam

.PHONY: FORCE
FORCE:
