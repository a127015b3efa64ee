#!/usr/bin/env bash
# The runtime image's entrypoint. The driver pod runs the serving job (the default); executor pods
# are created by Spark's Kubernetes scheduler with the argument `executor` and their settings in
# the environment (Spark's documented contract for custom images).
set -euo pipefail

# A random UID in group 0 (OpenShift's restricted SCC) has no passwd entry, and Hadoop's login in
# Spark fails without one: add it, as Spark's own images do (the image leaves /etc/passwd writable
# by group 0 for this alone).
if ! getent passwd "$(id -u)" >/dev/null 2>&1 && [ -w /etc/passwd ]; then
  echo "spark-$(id -u):x:$(id -u):$(id -g):anonymous uid:/tmp:/usr/sbin/nologin" >> /etc/passwd
fi

SPARK_HOME="${SPARK_HOME:-$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"

case "${1:-driver}" in
  executor)
    shift
    # SPARK_JAVA_OPT_<n>: the executor's JVM options, in order.
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    exec java "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}" \
      "$@"
    ;;
  driver)
    [ "$#" -gt 0 ] && shift
    exec python -m scorestream.runtime --config "${SCORESTREAM_CONFIG:-/etc/scorestream/job.json}" "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
