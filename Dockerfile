# One file, two images. Not built on the development machines (no Docker engine there); the
# packaging issue (#6) builds and scans them in CI.
#   docker build --target operator -t scorestream-operator .
#   docker build --target runtime  -t scorestream-runtime  .
FROM python:3.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY scorestream scorestream
COPY runtime runtime
COPY operator operator

FROM base AS operator
RUN pip install -c requirements.lock '.[operator]' && useradd -u 1000 -m scorestream
USER 1000
ENTRYPOINT ["scorestream", "operator"]

FROM base AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jdk-headless procps tini \
    && rm -rf /var/lib/apt/lists/*
RUN pip install -c requirements.lock '.[runtime]' && scorestream build-jvm \
    && useradd -u 185 -m spark
ENV PYSPARK_PYTHON=python PYSPARK_DRIVER_PYTHON=python HOME=/tmp
USER 185
ENTRYPOINT ["tini", "--"]
CMD ["python", "-m", "scorestream.runtime", "--config", "/etc/scorestream/job.json"]
