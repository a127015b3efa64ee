"""Candidates next to the serving model, in the real job: a canary takes a share of the records by
key hash, a shadow scores every record unseen; both are counted, withdrawn and restored."""

from __future__ import annotations

import zlib

import pytest

from scorestream.api.descriptor import CandidateRole
from scorestream.tools.demo import feed

from harness.streaming import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def as_candidate(d, strategy, percent=0.0):
    return d.model_copy(update={"candidate": CandidateRole(strategy=strategy, percent=percent)})


def produced(s, job, start, count, before):
    """Produce `count` wine records keyed from `start` and wait until the job has taken them in."""
    rows = feed.wine_rows()
    s.produce(feed.wine_records([rows[i % len(rows)] for i in range(start, start + count)], start=start))
    return job.wait_records(before + count)


def serving_the_tree(s, demo_models):
    s.publish(demo_models["tree"])
    return s.start().wait_ready()


def candidate_installed(s, job, d, strategy, percent=0.0) -> None:
    """Publish `d` as the job's candidate and wait until the job has installed it."""
    s.publish(as_candidate(d, strategy, percent))
    wait_until(lambda: (job.get("/models")["candidates"].get("wine") or {}).get("name") == d.name,
               what=f"the {strategy.lower()} {d.name} installed")


def test_canary_routes_its_share_by_key_and_is_withdrawn(serving, demo_models):
    s = serving()
    job = serving_the_tree(s, demo_models)
    candidate_installed(s, job, demo_models["linear"], "Canary", 10)
    n = 20_000
    stats = produced(s, job, 0, n, 0)
    # The same keys again: each must meet the version it met the first time.
    stats = produced(s, job, 0, 2_000, n)
    out = s.outputs(expect=n + 2_000)
    assert len(out) == n + 2_000
    version = {}
    for o in out:
        seen = version.setdefault(o["key"], o["model"]["name"])
        assert seen == o["model"]["name"], f"{o['key']} met two versions during the canary"
    to_canary = {k for k, v in version.items() if v == "linear"}
    share = len(to_canary) / n
    print(f"\ncanary: {share:.2%} of {n} keys to the candidate (asked 10%)")
    assert abs(share - 0.10) <= 0.02, f"canary share {share:.3%} over {n} keys, asked 10%"
    # Deterministic by key: the JVM's CRC32 bucket is the one anyone can compute.
    assert to_canary == {k for k in version if zlib.crc32(k.encode()) % 10000 < 1000}
    cand = stats["dataTypes"]["wine"]["candidate"]
    assert (cand["name"], cand["strategy"], cand["percent"]) == ("linear", "Canary", 10.0)
    assert cand["invocations"] == sum(1 for o in out if o["model"]["name"] == "linear")
    assert cand["errors"] == 0 and stats["dataTypes"]["wine"]["name"] == "tree"

    # A restart restores the canary with its share.
    assert job.stop() == 0
    job = s.start().wait_ready()
    assert job.get("/models")["candidates"]["wine"]["percent"] == 10.0

    s.withdraw("wine")
    wait_until(lambda: not job.get("/models")["candidates"], what="the canary withdrawn")
    produced(s, job, n, 1_000, 0)
    later = [o for o in s.outputs(expect=n + 3_000) if int(o["key"].split("-")[1]) >= n]
    assert len(later) == 1_000 and {o["model"]["name"] for o in later} == {"tree"}

    # A canary promoted: the same model published as the serving one. It serves every record,
    # and is no longer a candidate.
    candidate_installed(s, job, demo_models["linear"], "Canary", 50)
    s.publish(demo_models["linear"])
    wait_until(lambda: job.get("/models")["serving"]["wine"]["name"] == "linear", what="linear serving")
    assert job.get("/models")["candidates"] == {}, "a promoted candidate is no longer a candidate"
    produced(s, job, n + 1_000, 2_000, 1_000)
    promoted = [o for o in s.outputs(expect=n + 5_000) if int(o["key"].split("-")[1]) >= n + 1_000]
    assert len(promoted) == 2_000 and {o["model"]["name"] for o in promoted} == {"linear"}
    assert not s.read("dlq", idle=1.0)
    assert job.stop() == 0


def test_a_shadow_scores_every_record_and_writes_none_a_classifier_then_tensorflow(serving, demo_models):
    """Each shadow's figures are its own: the second is compared on the records after it came."""
    s = serving()
    job = serving_the_tree(s, demo_models)
    n = 3_000
    for i, candidate in enumerate(("shallow", "keras")):
        candidate_installed(s, job, demo_models[candidate], "Shadow")
        stats = produced(s, job, i * n, n, i * n)
        out = s.outputs(expect=(i + 1) * n)
        assert len(out) == (i + 1) * n and {o["model"]["name"] for o in out} == {"tree"}, \
            "only the serving model is written"
        cand = stats["dataTypes"]["wine"]["candidate"]
        cmp = cand["comparison"]
        assert cand["name"] == candidate and cand["strategy"] == "Shadow", cand
        assert cmp["records"] == n and cmp["errors"] == 0, cmp
        # Two different models of the same data: they agree often, not always.
        print(f"\nshadow {candidate}: {cmp}")
        assert 0.3 < cmp["agreement"] < 1.0, cmp
        assert cmp["meanAbsDiff"] > 0
        assert stats["dataTypes"]["wine"]["invocations"] == (i + 1) * n
    assert job.stop() == 0
