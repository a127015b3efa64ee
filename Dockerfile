# syntax=docker/dockerfile:1
# One file, two images (no Docker engine runs on the development machines; hadolint checks this
# file there, and tests/test_dockerfile.py checks it installs exactly what `make setup` installs):
#   docker build --target operator -t scorestream-operator .
#   docker build --target runtime  -t scorestream-runtime  .
# Versions are build arguments; the Python packages are pinned by requirements.lock, the same
# constraints file `make setup` uses.
ARG PYTHON_VERSION=3.11
ARG DEBIAN_RELEASE=bookworm

# --- sources, shared by both images -------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS source
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY scorestream scorestream
COPY runtime runtime
COPY operator operator

# --- the operator: Python, kopf and the Kubernetes client; no Spark, no TensorFlow ---------------
FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS operator
ARG PIP_VERSION=25.3
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=source /src /src
RUN pip install "pip==${PIP_VERSION}" \
    && pip install -c /src/requirements.lock "/src[operator]" \
    && rm -rf /src \
    && useradd --uid 1000 --user-group --no-create-home --shell /usr/sbin/nologin scorestream
USER 1000:1000
EXPOSE 8080 9090
ENTRYPOINT ["scorestream"]
CMD ["operator"]

# --- the JVM scorer, built by Maven (runtime/jvm/pom.xml, its JUnit tests run) with a JDK that the
# --- runtime image does not carry, and Spark's Kafka connector, resolved by Maven and checked
# --- against scorestream/jars.lock. Maven's repository is a build cache: a rebuild fetches nothing twice.
FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS scorer
ARG PIP_VERSION=25.3
ARG JDK_PACKAGE=openjdk-17-jdk-headless
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 SCORESTREAM_JVM_DIR=/jvm SCORESTREAM_CACHE=/jars
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends "${JDK_PACKAGE}" maven \
    && rm -rf /var/lib/apt/lists/*
COPY --from=source /src /src
# Editable: Maven builds the module of the source tree, JUnit tests included (the wheel carries
# only the main sources); the jar is named by their digest, which the runtime image's copy shares.
RUN pip install "pip==${PIP_VERSION}" \
    && pip install -c /src/requirements.lock -e "/src[runtime]"
RUN --mount=type=cache,target=/root/.m2 \
    scorestream build-jvm \
    && python -m scorestream.jars resolve spark-kafka

# --- the runtime: Java 17, pyspark and its Kafka connector, the PMML4S jars, the scorer, TensorFlow
FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS runtime
ARG PIP_VERSION=25.3
ARG JRE_PACKAGE=openjdk-17-jre-headless
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SCORESTREAM_JVM_DIR=/opt/scorestream/jvm SCORESTREAM_CACHE=/opt/scorestream/jars \
    PYSPARK_PYTHON=python PYSPARK_DRIVER_PYTHON=python HOME=/tmp
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends "${JRE_PACKAGE}" procps tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=source /src /src
RUN pip install "pip==${PIP_VERSION}" \
    && pip install -c /src/requirements.lock "/src[runtime]" \
    && rm -rf /src \
    && useradd --uid 185 --user-group --no-create-home --shell /usr/sbin/nologin spark
COPY --from=scorer /jvm /opt/scorestream/jvm
COPY --from=scorer /jars /opt/scorestream/jars
COPY --chmod=0755 runtime/docker/entrypoint.sh /opt/scorestream/entrypoint.sh
USER 185:185
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["tini", "--", "/opt/scorestream/entrypoint.sh"]
CMD ["driver"]
