"""Pinned sets of Maven artifacts (jars), resolved by Maven into a cache outside git.

Each set names Maven coordinates; Maven resolves their runtime closure (it caches downloads in
~/.m2), and the jars are copied, flat, into ``<cache>/<set>-<digest of the coordinates>/``.
Every jar is checked against ``jars.lock`` (``<set> <filename> <sha256>``, committed), so what
runs is exactly what was reviewed, whatever the resolution picked.

    python -m scorestream.jars resolve SET...   # fetch if not cached, verify, print the jars
    python -m scorestream.jars path SET         # the set's directory (resolved first)
    python -m scorestream.jars lock             # rewrite jars.lock from a fresh resolution
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

KAFKA = "4.3.1"
# The oldest Kafka broker the project claims (docs/compatibility.md): the compatibility tier's
# (`make test-compat`) jobs run against it, at-least-once and exactly-once.
OLDEST_KAFKA = "3.9.2"
STRIMZI = "0.49.0"
LOG4J = "2.25.4"  # the log4j-core that kafka_2.13 brings; its slf4j binding must match it
TENSORFLOW_JAVA = "1.1.0"
LOCK = Path(__file__).with_name("jars.lock")

# Maven's own default plugin version depends on the Maven release; pin it for the same result.
DEPENDENCY_PLUGIN = "3.8.1"


class JarError(RuntimeError):
    pass


@dataclass(frozen=True)
class JarSet:
    # group:artifact:version[:classifier]; "{pyspark}" stands for the installed pyspark's version.
    coordinates: tuple[str, ...]
    # Spark loads pyspark's own jars first: a second copy of one (another version) would only
    # shadow or clash, so such sets keep just the artifacts pyspark lacks.
    without_pyspark_jars: bool = False


SETS: dict[str, JarSet] = {
    # A KRaft broker (the demo's and the tests'). Kafka logs through slf4j 1.x, and the pom
    # brings log4j-core but no binding: without this one the broker logs nothing at all.
    "kafka-broker": JarSet((
        f"org.apache.kafka:kafka_2.13:{KAFKA}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J}",
    )),
    # The oldest claimed broker, KRaft as the one above; its pom brings no logging at all, so the
    # same binding brings log4j-core too.
    "kafka-broker-oldest": JarSet((
        f"org.apache.kafka:kafka_2.13:{OLDEST_KAFKA}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J}",
    )),
    # Spark's Kafka connector, for the installed pyspark.
    "spark-kafka": JarSet(("org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark}",), without_pyspark_jars=True),
    # The benchmark's Kafka Streams + PMML4S peer (benchmarks/).
    "kstreams-peer": JarSet((f"org.apache.kafka:kafka-streams:{KAFKA}", "org.pmml4s:pmml4s_2.13:0.9.15")),
    # TensorFlow's Java API: the job's JVM scorer runs TensorFlow models with it (TensorFlowModel),
    # as does the benchmark's Kafka Streams + TensorFlow peer (benchmarks/, next to the set above).
    # The API's pom brings the native bindings' Java classes only; the libraries themselves are
    # the platform's classified jar (~160 MB).
    "tensorflow": JarSet((
        f"org.tensorflow:tensorflow-core-api:{TENSORFLOW_JAVA}",
        f"org.tensorflow:tensorflow-core-native:{TENSORFLOW_JAVA}:linux-x86_64",
    )),
    # Strimzi's published API (its custom resources' Java model): the tests install the
    # KafkaTopic and KafkaUser CRDs that its `io.strimzi.api.kafka.Crds` builds (tests/strimzi.py).
    "strimzi-api": JarSet((f"io.strimzi:api:{STRIMZI}",)),
}


def coordinates(name: str) -> tuple[str, ...]:
    jar_set = _set(name)
    if not any("{pyspark}" in c for c in jar_set.coordinates):
        return jar_set.coordinates
    return tuple(c.format(pyspark=_pyspark_version()) for c in jar_set.coordinates)


def cache_root() -> Path:
    if os.environ.get("SCORESTREAM_CACHE"):
        return Path(os.environ["SCORESTREAM_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "scorestream" / "jars"


def cache_dir(name: str) -> Path:
    # Keyed by what was asked for: a new pin (or pyspark version) gets a new directory.
    key = "\n".join((*coordinates(name), f"without_pyspark_jars={_set(name).without_pyspark_jars}"))
    return cache_root() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def resolve(name: str) -> list[Path]:
    """The set's jars, sorted: from the cache, or fetched by Maven first; always verified."""
    lock = read_lock()
    target = cache_dir(name)
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            _fetch(name, tmp)
            verify(name, tmp, lock)  # never cache what the lock refuses
            # mkdtemp makes 0700: the jars are read by whoever runs Spark (an image's runtime
            # user, a random UID in group 0), not only by who resolved them.
            tmp.chmod(0o755)
            try:
                tmp.rename(target)  # atomic: readers see no directory or a complete one
            except OSError:
                if not target.is_dir():  # else a concurrent resolve won; use its copy
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return verify(name, target, lock)


def verify(name: str, directory: Path, lock: dict[str, dict[str, str]] | None = None) -> list[Path]:
    """Check every jar in directory against the lock, both ways; return the jars."""
    expected = (lock if lock is not None else read_lock()).get(name)
    if not expected:
        raise JarError(f"set {name!r} has no entry in {LOCK}: run `python -m scorestream.jars lock`")
    jars = sorted(directory.glob("*.jar"))
    problems = []
    for jar in jars:
        want = expected.get(jar.name)
        if want is None:
            problems.append(f"{jar} is not in the lock")
        elif (got := sha256(jar)) != want:
            problems.append(f"{jar} has sha256 {got}, the lock says {want}")
    problems += [f"{directory / f} is missing (in the lock)" for f in sorted(set(expected) - {j.name for j in jars})]
    if problems:
        raise JarError(
            f"jar set {name!r} does not match {LOCK.name}:\n  " + "\n  ".join(problems)
            + f"\n(remove {directory} to fetch it again; if the pins changed on purpose, "
            "run `python -m scorestream.jars lock` and review the diff)"
        )
    return jars


def read_lock(path: Path = LOCK) -> dict[str, dict[str, str]]:
    lock: dict[str, dict[str, str]] = {}
    if not path.is_file():
        return lock
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3:
            raise JarError(f"{path}:{n}: expected `<set> <filename> <sha256>`, got {line!r}")
        lock.setdefault(parts[0], {})[parts[1]] = parts[2]
    return lock


def write_lock(path: Path = LOCK) -> None:
    """Resolve every set afresh (not from the cache), record its digests and refresh the cache."""
    lines = ["# Written by `python -m scorestream.jars lock`: <set> <jar> <sha256>. Review changes."]
    for name in SETS:
        target = cache_dir(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            _fetch(name, tmp)
            digests = {jar.name: sha256(jar) for jar in sorted(tmp.glob("*.jar"))}
            lines += [f"{name} {jar} {digest}" for jar, digest in digests.items()]
            # Replace a cached copy only if it differs: running JVMs may be reading it.
            if target.is_dir() and {j.name: sha256(j) for j in target.glob("*.jar")} != digests:
                shutil.rmtree(target)
            if not target.is_dir():
                tmp.chmod(0o755)
                tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    path.write_text("\n".join(lines) + "\n")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _set(name: str) -> JarSet:
    try:
        return SETS[name]
    except KeyError:
        raise JarError(f"unknown jar set {name!r} (known: {', '.join(SETS)})") from None


def _fetch(name: str, into: Path) -> None:
    """Let Maven resolve the set's runtime closure, then copy the jars flat into `into`."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarError("`mvn` (Apache Maven) not found: `make setup` installs it (apt-get install maven)")
    deps = "".join(map(_dependency, coordinates(name)))
    with tempfile.TemporaryDirectory(prefix="scorestream-mvn-") as work:
        Path(work, "pom.xml").write_text(
            '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>local.scorestream</groupId><artifactId>jars-{name}</artifactId><version>0</version>"
            f"<packaging>pom</packaging><dependencies>{deps}</dependencies>"
            "<build><pluginManagement><plugins><plugin><groupId>org.apache.maven.plugins</groupId>"
            f"<artifactId>maven-dependency-plugin</artifactId><version>{DEPENDENCY_PLUGIN}</version>"
            "</plugin></plugins></pluginManagement></build></project>\n"
        )
        out = Path(work, "out")
        # The repository layout (group/artifact/version/file) tells each jar's artifact id,
        # which a flat file name cannot (spark-sql-kafka-0-10_2.13-4.2.0.jar).
        res = subprocess.run(
            [mvn, "-q", "-B", "-C", "-f", str(Path(work, "pom.xml")), "dependency:copy-dependencies",
             "-DincludeScope=runtime", "-Dmdep.useRepositoryLayout=true", f"-DoutputDirectory={out}"],
            capture_output=True, text=True,
        )
        if res.returncode != 0:
            raise JarError(f"mvn failed to resolve jar set {name!r} (exit {res.returncode}):\n{(res.stdout + res.stderr)[-4000:]}")
        skip = _pyspark_artifacts() if _set(name).without_pyspark_jars else None
        for jar in sorted(out.rglob("*.jar")):
            artifact = jar.parent.parent.name
            if skip is not None and _in_pyspark(artifact, skip):
                continue
            if (into / jar.name).exists():
                raise JarError(f"jar set {name!r}: two artifacts resolve to the same file name {jar.name}")
            shutil.copy2(jar, into / jar.name)


def _dependency(coordinate: str) -> str:
    """A pom's <dependency> for group:artifact:version[:classifier]."""
    group, artifact, version, *classifier = coordinate.split(":")
    if len(classifier) > 1:
        raise JarError(f"{coordinate!r}: expected group:artifact:version[:classifier]")
    extra = f"<classifier>{classifier[0]}</classifier>" if classifier else ""
    return (f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version>{extra}</dependency>")


def _pyspark_version() -> str:
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        raise JarError("this jar set follows the installed pyspark, and pyspark is not installed") from None


def _pyspark_artifacts() -> list[str]:
    spec = util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarError("pyspark is not installed")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return [p.name for p in jars.glob("*.jar")]


def _in_pyspark(artifact: str, pyspark_jars: list[str]) -> bool:
    # pyspark's file names are artifact-version[-classifier].jar: match the artifact id exactly.
    pattern = re.compile(re.escape(artifact) + r"-\d[^/]*\.jar")
    return any(pattern.fullmatch(f) for f in pyspark_jars)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scorestream.jars", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("resolve", help="fetch (if not cached) and verify sets; print their jars").add_argument("sets", nargs="+", metavar="SET")
    sub.add_parser("path", help="print a set's directory (resolving it first)").add_argument("set", metavar="SET")
    sub.add_parser("lock", help=f"rewrite {LOCK.name} from a fresh resolution of every set")
    args = parser.parse_args(argv)
    try:
        if args.command == "resolve":
            for name in args.sets:
                for jar in resolve(name):
                    print(jar)
        elif args.command == "path":
            resolve(args.set)
            print(cache_dir(args.set))
        else:
            write_lock()
            print(f"wrote {LOCK}")
    except JarError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
