# syntax=docker/dockerfile:1
# One file, three images. `make images` builds them (buildah where no Docker engine runs) into
# OCI archives; by hand:
#   docker build --target operator     -t scorestream-operator .
#   docker build --target runtime-pmml -t scorestream-runtime-pmml .   # PMML only, no TensorFlow
#   docker build --target runtime      -t scorestream-runtime .        # PMML and TensorFlow
# The base is any Debian-bookworm Python image (a digest where a registry serves one:
# --build-arg BASE_IMAGE=python:3.11-slim-bookworm@sha256:...). The Python packages are pinned by
# requirements.lock, the pins `make setup` uses (tests/test_dockerfile.py), installed with pip's
# --require-hashes against the lock's hashes, in a layer of their own before the project's code, so
# that a code change rebuilds in seconds. The lock's hashes need a resolution first (a dry run:
# each package is downloaded twice, the price of checking every file).
# Every file is readable by the runtime user and by any UID in group 0 (OpenShift's random UIDs).
ARG PYTHON_VERSION=3.11
ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim-bookworm

# --- each image's pinned requirements, from pyproject.toml: a stage of its own, so that an edit of
# --- pyproject.toml that leaves them as they are keeps every image's dependency layer ------------
FROM ${BASE_IMAGE} AS requirements
COPY pyproject.toml runtime/docker/requirements.py /deps/
RUN python /deps/requirements.py /deps/pyproject.toml operator > /deps/operator.txt \
    && python /deps/requirements.py /deps/pyproject.toml runtime > /deps/runtime.txt

# --- sources, shared by every image ------------------------------------------------------------
FROM ${BASE_IMAGE} AS source
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY scorestream scorestream
COPY runtime runtime
COPY operator operator
COPY tools tools

# --- the operator: Python, kopf and the Kubernetes client; no Spark, no TensorFlow ---------------
FROM ${BASE_IMAGE} AS operator
ARG PIP_VERSION=25.3
# A build machine behind a TLS-inspecting proxy names its CA bundle here, mounted for the build
# alone (hack/images.py does): nothing of it stays in an image.
ARG PIP_CERT
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="scorestream-operator" \
      org.opencontainers.image.description="The scorestream operator: runs a Spark job per ModelServing" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.lock /deps/
COPY --from=requirements /deps/operator.txt /deps/requirements.txt
COPY --from=requirements /deps/requirements.py /deps/
RUN python -m pip install "pip==${PIP_VERSION}" \
    && python /deps/requirements.py --hashed /deps/requirements.lock /deps/requirements.txt > /deps/hashed.txt \
    && python -m pip install --require-hashes -r /deps/hashed.txt \
    && rm -rf /deps \
    && useradd --uid 1000 --gid 0 --no-create-home --shell /usr/sbin/nologin scorestream
COPY --from=source /src /src
RUN python -m pip install --no-deps /src && rm -rf /src
USER 1000:0
# the operator's health probe and its metrics
EXPOSE 8080 9090
ENTRYPOINT ["scorestream"]
CMD ["operator"]

# --- the JVM scorer, built by Maven (runtime/jvm/pom.xml, its JUnit tests run) with a JDK that the
# --- runtime image does not carry, and Spark's Kafka connector and TensorFlow's Java API (into a
# --- folder of its own, for the TensorFlow image), resolved by Maven and checked against
# --- scorestream/jars.lock. Maven's repository is a build cache: a rebuild fetches nothing twice.
FROM ${BASE_IMAGE} AS scorer
ARG PIP_VERSION=25.3
ARG JDK_PACKAGE=openjdk-17-jdk-headless
ARG PIP_CERT
ARG MAVEN_OPTS
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 SCORESTREAM_JVM_DIR=/jvm SCORESTREAM_CACHE=/jars
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends "${JDK_PACKAGE}" maven \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock /deps/
COPY --from=requirements /deps/runtime.txt /deps/requirements.txt
COPY --from=requirements /deps/requirements.py /deps/
RUN python -m pip install "pip==${PIP_VERSION}" \
    && python /deps/requirements.py --hashed /deps/requirements.lock /deps/requirements.txt > /deps/hashed.txt \
    && python -m pip install --require-hashes -r /deps/hashed.txt
# What the jar is built from and no more, laid out as the installed package (pyproject.toml's
# package-dir): an edit of the operator or of the job's Python reruns no Maven build and no JUnit
# test. The module's tests come along (the wheel carries only the main sources); the jar is named
# by the digest of its main sources, which the runtime image's installed copy shares.
COPY scorestream/__init__.py scorestream/jars.py scorestream/jars.lock /src/scorestream/
COPY runtime/__init__.py runtime/jvm.py /src/scorestream/runtime/
COPY runtime/jvm /src/scorestream/runtime/jvm
ENV PYTHONPATH=/src
# A build container's hostname resolves to nothing: Spark, started by the JUnit tests, binds to
# loopback by name instead.
ENV SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost
RUN --mount=type=cache,target=/root/.m2 \
    python -m scorestream.runtime.jvm \
    && python -m scorestream.jars resolve spark-kafka \
    && SCORESTREAM_CACHE=/jars-tf python -m scorestream.jars resolve tensorflow \
    && chmod -R g=u /jars-tf

# --- the runtime, PMML only: Java 17, pyspark and its Kafka connector, PMML4S, the scorer ---------
FROM ${BASE_IMAGE} AS runtime-pmml
ARG PIP_VERSION=25.3
ARG PIP_CERT
ARG JRE_PACKAGE=openjdk-17-jre-headless
ARG VERSION=0.2.0
ARG FLAVOUR=pmml
LABEL org.opencontainers.image.title="scorestream-runtime-${FLAVOUR}" \
      org.opencontainers.image.description="The scorestream serving job (driver and Spark executors), ${FLAVOUR}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SCORESTREAM_JVM_DIR=/opt/scorestream/jvm SCORESTREAM_CACHE=/opt/scorestream/jars \
    PYSPARK_PYTHON=python PYSPARK_DRIVER_PYTHON=python HOME=/tmp SCORESTREAM_TENSORFLOW=absent
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends "${JRE_PACKAGE}" procps tini \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock /deps/
COPY --from=requirements /deps/runtime.txt /deps/requirements.txt
COPY --from=requirements /deps/requirements.py /deps/
RUN python -m pip install "pip==${PIP_VERSION}" \
    && python /deps/requirements.py --hashed /deps/requirements.lock /deps/requirements.txt > /deps/hashed.txt \
    && python -m pip install --require-hashes -r /deps/hashed.txt \
    && rm -rf /deps \
    && useradd --uid 185 --gid 0 --no-create-home --shell /usr/sbin/nologin spark \
    && chmod g=u /etc/passwd
COPY --from=source /src /src
RUN python -m pip install --no-deps /src && rm -rf /src
COPY --from=scorer --chown=185:0 /jvm /opt/scorestream/jvm
COPY --from=scorer --chown=185:0 /jars /opt/scorestream/jars
COPY --chmod=0755 runtime/docker/entrypoint.sh /opt/scorestream/entrypoint.sh
RUN chmod -R g=u /opt/scorestream
USER 185:0
WORKDIR /tmp
# the job's control port, its read-only port (/metrics, /stats, /models, probes), Spark's driver
# RPC and block manager (operator/desired.py)
EXPOSE 8080 9090 7078 7079
ENTRYPOINT ["tini", "--", "/opt/scorestream/entrypoint.sh"]
CMD ["driver"]

# --- the runtime with TensorFlow: the PMML image plus TensorFlow's Java API and native libraries,
# --- which the scorer runs TensorFlow models with (JavaCPP unpacks the libraries under $HOME on a
# --- JVM's first TensorFlow model) -------------------------------------------------------------------
FROM runtime-pmml AS runtime
# The group's modes were set in the scorer stage: buildah 1.28 (Debian's) takes only octal --chmod.
COPY --from=scorer --chown=185:0 /jars-tf/ /opt/scorestream/jars/
ENV SCORESTREAM_TENSORFLOW=present
LABEL org.opencontainers.image.title="scorestream-runtime" \
      org.opencontainers.image.description="The scorestream serving job (driver and Spark executors), PMML and TensorFlow"
