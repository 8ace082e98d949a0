# Tsubame: the two commands a new user needs are `make run` and `make test`.

GO            ?= go
BIN           := bin/tsubame
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -s -w -X main.version=$(VERSION)
STATICCHECK_VERSION := v0.8.2
GOBIN         := $(shell $(GO) env GOPATH 2>/dev/null)/bin
# Packages on the request path, for the micro-benchmarks.
HOT_PKGS      := ./internal/server ./internal/cache ./internal/render ./internal/decision ./internal/geo ./internal/device
BENCHTIME     ?= 1s
COUNT         ?= 6
APT_GET       := $(if $(filter 0,$(shell id -u)),,sudo) apt-get

.PHONY: all build run test check-go fmt-check vet lint race test-tools verify bench-micro clean release image sbom reproducible kafka

all: build

check-go:
	@command -v $(GO) >/dev/null 2>&1 || { echo "Go 1.26 or newer is required (https://go.dev/dl/); 'go' is not on PATH" >&2; exit 1; }

## build: compile bin/tsubame
build: check-go
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tsubame

## run: build, load the demo placements into ./data if it is empty, and serve on :4000
run: build
	./$(BIN) serve -demo

## test: everything CI checks: formatting, vet, staticcheck, and the race-enabled test suite
test: fmt-check vet lint race

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

race: check-go test-tools
	$(GO) test -race -count=1 -timeout 20m ./...
	@# Allocation bounds cannot hold under -race (its sync.Pool drops entries): again without it.
	$(GO) test -count=1 -run 'AllocatesNothing' ./internal/decision ./internal/device

# The tests start real Redis servers (redis-server and redis-cli), drive
# headless Chromium, check TLS with curl, limit file sizes with prlimit,
# check the systemd unit with systemd-analyze, build the container image
# with podman, run a Kafka broker (its jars from Maven Central, pinned in
# internal/kafkatest/jars.txt) on Java and a ClickHouse server, all from
# Debian's packages.
test-tools:
	@command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 && \
		command -v clickhouse-server >/dev/null 2>&1 && \
		command -v curl >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1 && command -v systemd-analyze >/dev/null 2>&1 && \
		command -v java >/dev/null 2>&1 && { command -v rsyslogd >/dev/null 2>&1 || [ -x /usr/sbin/rsyslogd ]; } && command -v xmllint >/dev/null 2>&1 && \
		[ -n "$(CONTAINER_TOOL)" ] || \
		{ $(APT_GET) update -qq && $(APT_GET) install -y -qq redis-server redis-tools chromium curl util-linux systemd \
			default-jre-headless rsyslog libxml2-utils clickhouse-server $(if $(CONTAINER_TOOL),,podman); }

## kafka: run a local Kafka broker (127.0.0.1:9092, topic tsubame-access) to try the access-log shipper
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
# tar.gz with README, LICENSE and the default configuration, and SHA-256
# checksums of the archives.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64

## release: dist/tsubame-<version>-<os>-<arch>.tar.gz for each platform, and dist/SHA256SUMS
release: check-go
	@rm -rf dist && mkdir -p dist
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; name=tsubame-$(VERSION)-$$os-$$arch; \
		mkdir -p dist/$$name; \
		echo "building $$name"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o dist/$$name/tsubame ./cmd/tsubame; \
		cp README.md LICENSE dist/$$name/; \
		cp internal/config/defaults.yaml dist/$$name/tsubame.yaml; \
		tar -C dist -czf dist/$$name.tar.gz --owner=0 --group=0 --numeric-owner $$name; \
		rm -rf dist/$$name; \
	done
	@$(MAKE) --no-print-directory sbom SBOM=dist/tsubame-$(VERSION).cdx.json
	@cd dist && sha256sum *.tar.gz *.cdx.json > SHA256SUMS && cat SHA256SUMS

# The SBOM: CycloneDX JSON of the modules linked into the binary.
CYCLONEDX_GOMOD := github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
SBOM ?= dist/tsubame-$(VERSION).cdx.json

## sbom: a CycloneDX SBOM of bin/tsubame's modules ($(SBOM))
sbom: check-go
	@mkdir -p $(dir $(SBOM))
	$(GO) run $(CYCLONEDX_GOMOD) app -json -licenses=false -output $(SBOM) -main cmd/tsubame .

## reproducible: build the release binary twice, from empty build caches, and compare them byte for byte
reproducible: check-go
	@d=$$(mktemp -d); \
	for i in 1 2; do \
		GOCACHE=$$d/cache$$i CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $$d/tsubame$$i ./cmd/tsubame || { rm -rf $$d; exit 1; }; \
	done; \
	if cmp -s $$d/tsubame1 $$d/tsubame2; then \
		echo "reproducible: two builds of $(VERSION) are byte-identical (sha256 $$(sha256sum < $$d/tsubame1 | cut -c1-16)...)"; rm -rf $$d; \
	else echo "reproducible: two builds of $(VERSION) differ" >&2; rm -rf $$d; exit 1; fi

# The container image (Containerfile): podman, else docker with a running
# daemon. IMAGE_ARCH builds for another architecture (the binary is
# cross-compiled; no emulation needed). The Kubernetes manifests run this
# image by its repository (tsubame); deploy/kubernetes/kustomization.yaml
# sets the registry and the version (deploy/kubernetes/manifests_test.go
# holds them together).
CONTAINER_TOOL = $(shell command -v podman >/dev/null 2>&1 && echo podman || \
	{ docker info >/dev/null 2>&1 && echo docker; })
IMAGE      ?= tsubame:$(VERSION)
IMAGE_ARCH ?= $(shell $(GO) env GOARCH 2>/dev/null)
IMAGE_CTX  := build/image

## image: the container image $(IMAGE) (podman or docker; podman is installed when neither works)
image: check-go
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
	$$tool build $$([ "$$tool" = podman ] && echo --layers=false) --platform linux/$(IMAGE_ARCH) --build-arg VERSION=$(VERSION) -f Containerfile -t $(IMAGE) $(IMAGE_CTX); \
	echo "built $(IMAGE) with $$tool"

# The load tools of make bench, from Debian's packages when missing.
BENCH_DURATION ?= 10s
BENCH_CONNECTIONS ?= 100
BENCH_ROUNDS ?= 3
BENCH_SCENARIOS ?=
# A git revision to measure this build against (the *-baseline scenarios).
BENCH_BASELINE ?=

.PHONY: bench bench-tools
bench-tools:
	@command -v wrk >/dev/null 2>&1 && command -v nginx >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1 && \
		[ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] && [ -f /usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so ] || \
		{ $(APT_GET) update -qq && $(APT_GET) install -y -qq wrk nginx-light libnginx-mod-http-lua lua-cjson redis-server; }

## bench: wrk against the real binary and a reference nginx, interleaved; writes BENCHMARKS.md
bench: build bench-tools
	$(GO) run ./bench -bin $(BIN) -duration $(BENCH_DURATION) -connections $(BENCH_CONNECTIONS) \
		-rounds $(BENCH_ROUNDS) $(if $(BENCH_SCENARIOS),-scenarios $(BENCH_SCENARIOS)) $(if $(BENCH_BASELINE),-baseline $(BENCH_BASELINE))
