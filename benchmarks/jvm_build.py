"""The benchmarks' JVM module (jvm/: the Kafka Streams peer, the counting-cost probe, the broker's
request times), built by Maven on first use against the scorer jar, named by a digest of both:
built once per change."""

from __future__ import annotations

from pathlib import Path

from scorestream.runtime import jvm

MODULE = Path(__file__).parent / "jvm"


def bench_jar() -> Path:
    scorer = jvm.scorer_jar()
    name = f"scorestream-bench-jvm-{jvm.module_digest(MODULE, scorer.name)}"
    jar = MODULE / "target" / f"{name}.jar"
    if not jar.is_file():
        jvm.maven(MODULE / "pom.xml", "package", f"-Dscorestream.jvm.jar={scorer}", f"-Dbench.jar={name}")
    return jar
