"""The pinned jar sets: the lock covers each set exactly, and the cache is checked against it."""

from __future__ import annotations

import shutil

import pytest

from scorestream import jars


def test_lock_covers_each_set_exactly():
    lock = jars.read_lock()
    assert set(lock) == set(jars.SETS)
    for name in jars.SETS:
        # resolve() verifies both ways; the names are compared here as well, to say which differ.
        assert {p.name for p in jars.resolve(name)} == set(lock[name]), name


def test_spark_kafka_keeps_only_what_pyspark_lacks():
    names = {p.name for p in jars.resolve("spark-kafka")}
    prefixes = ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-", "kafka-clients-", "commons-pool2-")
    assert len(names) == len(prefixes) and all(any(n.startswith(p) for n in names) for p in prefixes), names


@pytest.fixture
def cache_copy(tmp_path, monkeypatch):
    """The spark-kafka set copied to a cache of its own (SCORESTREAM_CACHE), to tamper with."""
    original = jars.cache_dir("spark-kafka")
    jars.resolve("spark-kafka")
    monkeypatch.setenv("SCORESTREAM_CACHE", str(tmp_path / "cache"))
    copy = jars.cache_dir("spark-kafka")
    assert copy != original
    shutil.copytree(original, copy)
    return copy


def test_a_warm_cache_needs_no_maven(cache_copy, monkeypatch):
    def no_fetch(*_):
        raise AssertionError("mvn was called on a warm cache")

    monkeypatch.setattr(jars, "_fetch", no_fetch)
    assert [p.parent for p in jars.resolve("spark-kafka")] == [cache_copy] * len(jars.read_lock()["spark-kafka"])


def test_a_tampered_jar_is_refused(cache_copy):
    jar = next(cache_copy.glob("kafka-clients-*.jar"))
    data = bytearray(jar.read_bytes())
    data[len(data) // 2] ^= 0xFF
    jar.write_bytes(bytes(data))
    with pytest.raises(jars.JarError, match=rf"{jar.name} has sha256 [0-9a-f]{{64}}, the lock says"):
        jars.resolve("spark-kafka")


def test_an_extra_or_a_missing_jar_is_refused(cache_copy):
    (cache_copy / "extra-1.0.jar").write_bytes(b"PK")
    next(cache_copy.glob("commons-pool2-*.jar")).unlink()
    with pytest.raises(jars.JarError) as e:
        jars.resolve("spark-kafka")
    assert "extra-1.0.jar is not in the lock" in str(e.value)
    assert "commons-pool2-" in str(e.value) and "is missing" in str(e.value)


def test_without_maven_a_cold_cache_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("SCORESTREAM_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(jars.shutil, "which", lambda name: None)
    with pytest.raises(jars.JarError, match="`mvn` .* not found"):
        jars.resolve("kafka-broker")
    assert not any((tmp_path / "empty").iterdir())  # no half-written set left behind


@pytest.mark.jvm  # Maven resolves the set into an empty cache
def test_a_resolved_set_is_readable_by_every_user(tmp_path, monkeypatch):
    """The image's runtime user (and OpenShift's random UIDs) read jars that root resolved."""
    monkeypatch.setenv("SCORESTREAM_CACHE", str(tmp_path / "cache"))
    target = jars.cache_dir("spark-kafka")
    for jar in jars.resolve("spark-kafka"):
        assert jar.stat().st_mode & 0o004, f"{jar} is not readable by others"
    assert target.stat().st_mode & 0o005 == 0o005, f"{target} has mode {oct(target.stat().st_mode)}"
