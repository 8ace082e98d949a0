# Tsubame: the two commands a new user needs are `make run` and `make test`.

GO            ?= go
BIN           := bin/tsubame
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -s -w -X main.version=$(VERSION)
STATICCHECK_VERSION := v0.8.2
GOBIN         := $(shell $(GO) env GOPATH 2>/dev/null)/bin
# Packages on the request path, for the micro-benchmarks.
HOT_PKGS      := ./internal/server ./internal/cache ./internal/render ./internal/decision ./internal/geo ./internal/device \
                 ./internal/ads ./internal/bidder ./internal/track ./internal/openrtb ./internal/report ./internal/framing
BENCHTIME     ?= 1s
COUNT         ?= 6
APT_GET       := $(if $(filter 0,$(shell id -u)),,sudo) apt-get

.PHONY: all build run test test-short check-go fmt-check vet lint race test-tools axe screenshots verify bench-micro clean release release-tool sign image sbom sbom-tool reproducible kafka

all: build

check-go:
	@command -v $(GO) >/dev/null 2>&1 || { echo "Go 1.26 or newer is required (https://go.dev/dl/); 'go' is not on PATH" >&2; exit 1; }

## build: compile bin/tsubame
build: check-go
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tsubame

## run: build, load the demo placements into ./data if it is empty, and serve on :4000 (admin on 127.0.0.1:4001); TSUBAME_LISTEN=:8080 TSUBAME_ADMIN_LISTEN=127.0.0.1:8081 make run moves them
run: build
	./$(BIN) serve -demo

## test: everything CI checks: formatting, vet, staticcheck, and the race-enabled test suite
test: fmt-check vet lint race

## test-short: the tests that need only Go, in under 3 minutes on 2 cores (go test -short, no -race: it needs a C compiler); lists each skipped test and why
test-short: check-go
	@$(GO) build -o $(TOOLS_DIR)/testreport ./tools/testreport
	@GO=$(GO) $(TOOLS_DIR)/testreport -short -count=1 ./...

fmt-check: check-go
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: check-go
	$(GO) vet ./...

lint: check-go
	@if [ ! -x "$(GOBIN)/staticcheck" ] || ! "$(GOBIN)/staticcheck" -version 2>/dev/null | grep -q "$(STATICCHECK_VERSION:v%=%)"; then \
		echo "installing staticcheck $(STATICCHECK_VERSION)"; \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) || \
			{ echo "staticcheck could not be installed (module proxy unreachable?): lint step skipped" >&2; exit 0; }; \
	fi; \
	if [ -x "$(GOBIN)/staticcheck" ]; then "$(GOBIN)/staticcheck" ./...; fi

race: check-go test-tools axe
	TSUBAME_AXE=$(AXE_JS) $(GO) test -race -count=1 -timeout 60m ./...
	@# Allocation bounds cannot hold under -race (its sync.Pool drops entries): again without it.
	$(GO) test -count=1 -run 'AllocatesNothing|Allocations' ./internal/decision ./internal/device ./internal/bidder ./internal/openrtb ./internal/track ./internal/ads

# The tests start real Redis servers (redis-server and redis-cli), drive
# headless Chromium, check TLS with curl, limit file sizes with prlimit,
# check the systemd unit with systemd-analyze, build the container image
# with podman, run a Kafka broker (its jars from Maven Central, pinned in
# internal/kafkatest/jars.txt) on Java and a ClickHouse server, and sign a
# release with ssh-keygen, all from Debian's packages, and npm installs
# axe-core (make axe). make test-short needs none of them: it skips what
# needs them and says so.
test-tools:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null 2>&1 || missing="$$missing redis-tools"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v clickhouse-server >/dev/null 2>&1 || missing="$$missing clickhouse-server"; \
	command -v curl >/dev/null 2>&1 || missing="$$missing curl"; \
	command -v prlimit >/dev/null 2>&1 || missing="$$missing util-linux"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	command -v rsyslogd >/dev/null 2>&1 || [ -x /usr/sbin/rsyslogd ] || missing="$$missing rsyslog"; \
	command -v xmllint >/dev/null 2>&1 || missing="$$missing libxml2-utils"; \
	command -v ssh-keygen >/dev/null 2>&1 || missing="$$missing openssh-client"; \
	[ -n "$(CONTAINER_TOOL)" ] || missing="$$missing podman"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq $$missing; \
	fi

# axe-core, the accessibility checker the dashboard's browser tests run in
# Chromium (TestDashboardAccessibility), pinned with its integrity hash in
# tools/axe/package-lock.json and installed beside it by npm ci. Once the
# pinned version is there nothing is fetched, so a machine offline still
# tests; the tests find it through TSUBAME_AXE.
AXE_DIR := tools/axe
AXE_JS  := $(abspath $(AXE_DIR))/node_modules/axe-core/axe.min.js

## axe: install axe-core (the version tools/axe/package-lock.json pins) into tools/axe/node_modules
axe:
	@command -v npm >/dev/null 2>&1 || { $(APT_GET) update -qq && $(APT_GET) install -y -qq npm; }
	@want=$$(node -p 'require("./$(AXE_DIR)/package-lock.json").packages["node_modules/axe-core"].version'); \
	have=$$(node -p 'try { require("./$(AXE_DIR)/node_modules/axe-core/package.json").version } catch (e) { "" }'); \
	[ "$$want" = "$$have" ] || { echo "installing axe-core $$want"; npm ci --prefix $(AXE_DIR) --ignore-scripts --no-audit --no-fund; }

# The screenshots of the dashboard in docs/admin.md, taken by the
# accessibility test as it walks every screen (a 1280x900 window, the demo
# data). Not part of make test: CI never rewrites them.
SCREENSHOTS ?= docs/screenshots

## screenshots: the dashboard's screenshots of docs/admin.md, written to $(SCREENSHOTS) (needs Chromium)
screenshots: check-go axe
	@mkdir -p $(SCREENSHOTS)
	TSUBAME_AXE=$(AXE_JS) TSUBAME_SCREENSHOTS=$(abspath $(SCREENSHOTS)) $(GO) test -count=1 -timeout 20m -run '^TestDashboardAccessibility$$' ./cmd/tsubame/

## kafka: run a local Kafka broker (127.0.0.1:9092; KAFKA_PORT=9093 make kafka moves it; topic tsubame-access) to try the access-log shipper
KAFKA_PORT ?= 9092
KAFKA_DIR  ?= ./kafka-data
kafka: check-go
	@command -v java >/dev/null 2>&1 || { $(APT_GET) update -qq && $(APT_GET) install -y -qq default-jre-headless; }
	$(GO) run ./tools/kafka serve -port $(KAFKA_PORT) -dir $(KAFKA_DIR)

## verify: check that downloaded modules match go.sum
verify: check-go
	$(GO) mod verify

## bench-micro: hot-path micro-benchmarks with allocs/op, benchstat-friendly
bench-micro: check-go
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=$(COUNT) $(HOT_PKGS)

clean:
	rm -rf bin dist build

# Release archives: static binaries (no cgo) for these platforms, each in a
# tar.gz with README, LICENSE, the default configuration, the deploy files
# (systemd unit, Kubernetes manifests, the container's configuration,
# ClickHouse schema) and the docs, and each with a CycloneDX SBOM; SHA-256
# checksums of all, signed when SIGNING_KEY names an ssh key. Everything is
# stamped with the commit's time (SOURCE_DATE_EPOCH), not the clock, so two
# builds of a commit with the same Go are byte-identical (make
# reproducible); tools/release writes the archives and stamps the SBOMs.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
DIST              ?= dist
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
COMMIT            ?= $(shell git rev-parse HEAD 2>/dev/null)
# Tracked files only: a stray file in the tree never ships.
RELEASE_FILES      = README.md LICENSE BENCHMARKS.md $(filter-out %_test.go,$(shell git ls-files deploy/systemd deploy/kubernetes \
	deploy/container/tsubame.yaml deploy/clickhouse docs 2>/dev/null || \
	find deploy/systemd deploy/kubernetes deploy/container/tsubame.yaml deploy/clickhouse docs -type f | LC_ALL=C sort))
TOOLS_DIR         := build/tools
RELEASE_TOOL      := $(TOOLS_DIR)/release
# An ssh private key (ed25519) that signs SHA256SUMS, or its .pub with the
# key in ssh-agent; never one kept in this repository.
SIGNING_KEY       ?=

release-tool: check-go
	@$(GO) build -o $(RELEASE_TOOL) ./tools/release

## release: dist/tsubame-<version>-<os>-<arch>.tar.gz and .cdx.json (SBOM) for each platform, dist/SHA256SUMS (signed with SIGNING_KEY=key)
release: check-go release-tool sbom-tool
	@[ -n "$(DIST)" ] || { echo "release: DIST is empty" >&2; exit 1; }
	@rm -rf $(DIST)/tsubame-* $(DIST)/SHA256SUMS $(DIST)/SHA256SUMS.sig && mkdir -p $(DIST)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; name=tsubame-$(VERSION)-$$os-$$arch; \
		echo "building $$name"; \
		$(if $(RELEASE_GOCACHE),GOCACHE=$(RELEASE_GOCACHE)) CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch \
			$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(DIST)/$$name.bin ./cmd/tsubame; \
		SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(RELEASE_TOOL) archive -o $(DIST)/$$name.tar.gz -prefix $$name \
			$(DIST)/$$name.bin=tsubame internal/config/defaults.yaml=tsubame.yaml $(RELEASE_FILES); \
		rm -f $(DIST)/$$name.bin; \
		$(MAKE) --no-print-directory sbom SBOM=$(DIST)/$$name.cdx.json SBOM_ENV="CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch"; \
	done
	@cd $(DIST) && sha256sum tsubame-$(VERSION)-*.tar.gz tsubame-$(VERSION)-*.cdx.json > SHA256SUMS && cat SHA256SUMS
	@$(if $(SIGNING_KEY),$(MAKE) --no-print-directory sign)

## sign: sign $(DIST)/SHA256SUMS with SIGNING_KEY (ssh-keygen -Y sign -n file) into SHA256SUMS.sig
sign:
	@[ -n "$(SIGNING_KEY)" ] || { echo "sign: set SIGNING_KEY to an ssh private key (or its .pub, with the key in ssh-agent)" >&2; exit 1; }
	@command -v ssh-keygen >/dev/null 2>&1 || { echo "sign: ssh-keygen (OpenSSH 8.1 or newer) is needed" >&2; exit 1; }
	@rm -f $(DIST)/SHA256SUMS.sig
	@ssh-keygen -q -Y sign -f "$(SIGNING_KEY)" -n file $(DIST)/SHA256SUMS
	@echo "signed $(DIST)/SHA256SUMS with $$(ssh-keygen -l -f "$(SIGNING_KEY)" | cut -d' ' -f1-2): publish that key for ssh-keygen -Y verify"

# The SBOM: CycloneDX JSON of the modules linked into the binary, for the
# platform SBOM_ENV names (GOOS, GOARCH, CGO_ENABLED: the module set can
# differ by platform); by default this machine's. The generator's random
# serial and clock timestamp are left out, and tools/release sets both from
# the commit. The generator is built with -trimpath, once, for this machine.
CYCLONEDX_GOMOD := github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
SBOM     ?= $(DIST)/tsubame-$(VERSION).cdx.json
SBOM_ENV ?=

sbom-tool: check-go
	@CGO_ENABLED=0 GOBIN=$(abspath $(TOOLS_DIR)) $(GO) install -trimpath $(CYCLONEDX_GOMOD)

## sbom: a CycloneDX SBOM of bin/tsubame's modules ($(SBOM)), stamped with the commit and its time
sbom: check-go release-tool sbom-tool
	@mkdir -p $(dir $(SBOM))
	$(SBOM_ENV) $(TOOLS_DIR)/cyclonedx-gomod app -json -licenses=false -noserial -notimestamp -output $(SBOM) -main cmd/tsubame .
	@SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(RELEASE_TOOL) sbom -commit "$(COMMIT)" $(SBOM)

# make reproducible builds one platform: a second one doubles the time
# and checks nothing the first does not.
REPRODUCIBLE_PLATFORMS ?= linux/amd64

## reproducible: make release twice ($(REPRODUCIBLE_PLATFORMS)), the binaries from empty build caches; archives, SBOMs and SHA256SUMS must be byte-identical
reproducible: check-go
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	for i in 1 2; do \
		$(MAKE) --no-print-directory release DIST=$$d/dist$$i RELEASE_GOCACHE=$$d/cache$$i VERSION=$(VERSION) \
			RELEASE_PLATFORMS="$(REPRODUCIBLE_PLATFORMS)" SIGNING_KEY= >$$d/log$$i 2>&1 || { cat $$d/log$$i >&2; exit 1; }; \
	done; \
	if diff -r $$d/dist1 $$d/dist2 >/dev/null; then \
		echo "reproducible: two releases of $(VERSION) ($(REPRODUCIBLE_PLATFORMS)) are byte-identical:"; sed 's/^/  /' $$d/dist1/SHA256SUMS; \
	else echo "reproducible: two releases of $(VERSION) differ:" >&2; diff -rq $$d/dist1 $$d/dist2 >&2; exit 1; fi

# The container image (Containerfile): podman, else docker with a running
# daemon. IMAGE_ARCH builds for another architecture (the binary is
# cross-compiled; no emulation needed). The Kubernetes manifests run this
# image by its repository (tsubame); deploy/kubernetes/kustomization.yaml
# sets the registry and the version (deploy/kubernetes/manifests_test.go
# holds them together). podman builds with --format docker: the OCI image
# format has no HEALTHCHECK, and podman drops it from OCI images.
CONTAINER_TOOL = $(shell command -v podman >/dev/null 2>&1 && echo podman || \
	{ docker info >/dev/null 2>&1 && echo docker; })
IMAGE      ?= tsubame:$(VERSION)
IMAGE_ARCH ?= $(shell $(GO) env GOARCH 2>/dev/null)
IMAGE_CTX  := build/image
# The org.opencontainers.image.source label: the https address of the
# origin remote (no user, no local path), or no label when there is none.
IMAGE_SOURCE ?= $(shell $(RELEASE_TOOL) source-url "$$(git remote get-url origin 2>/dev/null)")

## image: the container image $(IMAGE) (podman or docker; podman is installed when neither works); IMAGE_SOURCE=URL labels its source
image: check-go release-tool
	@tool="$(CONTAINER_TOOL)"; \
	if [ -z "$$tool" ]; then \
		echo "installing podman"; $(APT_GET) update -qq && $(APT_GET) install -y -qq podman || exit 1; tool=podman; \
	fi; \
	[ -f /etc/ssl/certs/ca-certificates.crt ] || \
		{ $(APT_GET) update -qq && $(APT_GET) install -y -qq ca-certificates; } || exit 1; \
	set -e; rm -rf $(IMAGE_CTX) && mkdir -p $(IMAGE_CTX)/empty; \
	echo "building the linux/$(IMAGE_ARCH) binary"; \
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(IMAGE_CTX)/tsubame ./cmd/tsubame; \
	cp /etc/ssl/certs/ca-certificates.crt $(IMAGE_CTX)/; \
	cp "$$($(GO) env GOROOT)/lib/time/zoneinfo.zip" $(IMAGE_CTX)/; \
	cp deploy/container/tsubame.yaml $(IMAGE_CTX)/tsubame.yaml; \
	printf 'root:x:0:0:root:/:/sbin/nologin\ntsubame:x:65532:65532:tsubame:/data:/sbin/nologin\n' > $(IMAGE_CTX)/passwd; \
	printf 'root:x:0:\ntsubame:x:65532:\n' > $(IMAGE_CTX)/group; \
	chmod 0755 $(IMAGE_CTX)/tsubame; chmod -R a+rX $(IMAGE_CTX); \
	created=$$(date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r $(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ); \
	$$tool build $$([ "$$tool" = podman ] && echo --layers=false --format docker --timestamp $(SOURCE_DATE_EPOCH)) --platform linux/$(IMAGE_ARCH) \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$(COMMIT) --build-arg CREATED=$$created \
		$(if $(IMAGE_SOURCE),--label 'org.opencontainers.image.source=$(IMAGE_SOURCE)') \
		-f Containerfile -t $(IMAGE) $(IMAGE_CTX); \
	echo "built $(IMAGE) with $$tool"

# The load tools of make bench, from Debian's packages when missing.
BENCH_DURATION ?= 10s
BENCH_CONNECTIONS ?= 100
BENCH_ROUNDS ?= 3
BENCH_SCENARIOS ?=
# The memory scenarios' one run each (rtb-memory, decide-memory: opt-in, named in BENCH_SCENARIOS).
BENCH_MEMORY_DURATION ?= 10m
# A git revision to measure this build against (the *-baseline scenarios).
BENCH_BASELINE ?=

.PHONY: bench bench-tools bench-scale bench-ssp bench-rtb
bench-tools:
	@command -v wrk >/dev/null 2>&1 && command -v nginx >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1 && \
		[ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] && [ -f /usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so ] || \
		{ $(APT_GET) update -qq && $(APT_GET) install -y -qq wrk nginx-light libnginx-mod-http-lua lua-cjson redis-server; }

## bench-scale: an account of a million generated line items on Redis and three nodes; writes its section of BENCHMARKS.md
SCALE_LINES ?= 1000000
bench-scale: build bench-tools
	$(GO) run ./bench -bin $(BIN) -scale $(SCALE_LINES)

## bench-ssp: the sell side's auction with four partners (5-20 ms) and a hung one; writes its section of BENCHMARKS.md
bench-ssp: build bench-tools
	$(GO) run ./bench -bin $(BIN) -ssp -duration $(BENCH_DURATION) -rounds $(BENCH_ROUNDS)

## bench-rtb: the bidder on a real account (57 line items, budgets, JSON log) against an nginx + Lua bidder, at c=64 and at a fixed rate; writes its section of BENCHMARKS.md
BENCH_RTB_ROUNDS ?= 5
bench-rtb: build bench-tools
	$(GO) run ./bench -bin $(BIN) -rtb-account -duration $(BENCH_DURATION) -rounds $(BENCH_RTB_ROUNDS)

## bench: wrk against the real binary and a reference nginx, interleaved, then bench-rtb; writes BENCHMARKS.md
bench: build bench-tools
	$(GO) run ./bench -bin $(BIN) -duration $(BENCH_DURATION) -connections $(BENCH_CONNECTIONS) \
		-rounds $(BENCH_ROUNDS) -memory-duration $(BENCH_MEMORY_DURATION) $(if $(BENCH_SCENARIOS),-scenarios $(BENCH_SCENARIOS)) $(if $(BENCH_BASELINE),-baseline $(BENCH_BASELINE))
	$(if $(BENCH_SCENARIOS),,$(GO) run ./bench -bin $(BIN) -rtb-account -duration $(BENCH_DURATION) -rounds $(BENCH_RTB_ROUNDS))
