"""The test harness (tests/harness/), loaded as pytest plugins: the Kafka broker, serving jobs as
processes and the quick tier (fixtures), the real API server and an operator process against it
(operator), the job's typed stand-in (fake_job) and Spark's standalone cluster (standalone)."""

import os

pytest_plugins = ("harness.fixtures", "harness.operator", "harness.fake_job", "harness.standalone")

# The long checks (tests/long/) run from their make targets (make fuzz-operator), not in `make test`.
collect_ignore = [] if os.environ.get("SCORESTREAM_LONG_CHECKS") else ["long"]
