"""Model-quality signals in the stream, end to end on real parts: the operator (against the tests'
real API server) runs canaries on the real job (Spark local) fed by the real broker, with the rule
maxDrift. A candidate's baseline is its spec.model.baseline, else its verification sample: records
the job scores with it when it admits it; the JVM scorer counts the candidate's inputs and
predictions as it scores.

- A candidate trained and verified on shifted data (alcohol four degrees higher than the stream
  carries): on the live stream its predictions move away from those on its sample, its prediction
  drift passes maxDrift, and the canary is rolled back.
- The same kind of model trained and verified on the stream's own data: its drift stays under the
  bound and the canary is promoted.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from scorestream.tools.demo import feed, models

from harness.operator import Operated, apply, condition, events, until
from test_rollout import model, rolled_out, trial, tree_serving

pytestmark = [pytest.mark.spark, pytest.mark.broker]

MAX_DRIFT = 0.2
ALCOHOL = feed.WINE_COLUMNS.index("alcohol")


def shifted(rows, by: float = 4.0):
    return [r[:ALCOHOL] + [r[ALCOHOL] + by] + r[ALCOHOL + 1:] for r in rows]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The serving tree, and two linear candidates with their baselines: one of the stream's own
    rows (every fifth: the stream cycles through all of them) given as spec.model.baseline, one of
    those rows shifted, on which that candidate was also trained, as its verification sample."""
    rows = feed.wine_rows()
    folder = tmp_path_factory.mktemp("models")
    out = {}
    for name, data, sample in (("tree", models.tree_pmml(rows), None),
                               ("linear", models.linear_pmml(rows), rows[::5]),
                               ("shifted", models.linear_pmml(shifted(rows)), shifted(rows)[::5])):
        path = folder / f"{name}.pmml"
        path.write_bytes(data)
        out[name] = {"format": "pmml", "uri": path.as_uri()}
        if sample is not None:
            lines = folder / f"{name}-sample.jsonl"
            lines.write_text("".join(feed.wine_json(r).decode() + "\n" for r in sample))
            out[name]["baseline" if name == "linear" else "verification"] = {"uri": lines.as_uri()}
    return out


@pytest.mark.timeout(900)
async def test_a_canary_whose_predictions_drift_is_rolled_back_and_one_that_does_not_is_promoted(
        api, broker, serving, artifacts, tmp_path):
    s = serving(partitions=2)
    async with Operated(api, observeInterval=2, rolloutPoll=0.25) as run:
        body, job, stream = await tree_serving(
            api, run, s, broker, artifacts, tmp_path, {"triggerInterval": "500ms"}, fields=False,
            rollout={"strategy": "Canary", "canary": {
                "percent": 30, "minRecords": 1000, "promoteAfter": "3s", "maxErrorRate": 0.01,
                "maxLatencyRatio": 100, "maxDrift": MAX_DRIFT}})
        try:
            # Trained and verified on shifted data: rolled back for its drift.
            body["spec"]["model"] = model(artifacts, "shifted", 2)
            await apply(api, body)
            cond = await until(lambda: condition(api, "wine", "ModelReady").get("reason") == "RolledBack"
                               and condition(api, "wine", "ModelReady"), timeout=180, what="RolledBack")
            assert "drifted from its baseline" in cond["message"], cond
            rolled_back = trial(api)
            assert rolled_back["phase"] == "RolledBack", rolled_back
            shifted_psi = rolled_back["candidate"]["predictionDrift"]
            assert shifted_psi > MAX_DRIFT and rolled_back["candidate"]["errors"] == 0, rolled_back
            drift = job.get("/stats")["dataTypes"]["wine"]["previous"]
            shifted_stats = next(p["drift"] for p in drift if p["version"] == "2")
            await until(lambda: events(api, "CandidateRolledBack"), what="a CandidateRolledBack event")

            # Trained and verified on the stream's own data: promoted, its drift under the bound.
            body["spec"]["model"] = model(artifacts, "linear", 3)
            await apply(api, body)
            await rolled_out(api, "wine-linear", 3, timeout=180)
            promoted = trial(api)
            assert promoted["phase"] == "Promoted", promoted
            same_psi = promoted["candidate"]["predictionDrift"]
            assert same_psi is not None and same_psi <= MAX_DRIFT, promoted
            same_stats = job.get("/stats")["dataTypes"]["wine"]["drift"]
        finally:
            await asyncio.to_thread(stream.stop)
        assert stream.error is None
        # The job's figures: the shifted candidate's alcohol moved, the other's did not.
        assert shifted_stats["features"]["alcohol"]["psi"] > 1.0, shifted_stats
        assert same_stats["features"]["alcohol"]["psi"] < MAX_DRIFT, same_stats
        print(f"\ncanary trained and verified on shifted data: prediction PSI {shifted_psi:.3f} "
              f"(KS {shifted_stats['prediction']['ks']:.3f}) after {shifted_stats['records']} records, "
              f"alcohol PSI {shifted_stats['features']['alcohol']['psi']:.3f} -> rolled back;\n"
              f"canary on the stream's own data: prediction PSI {same_psi:.3f} at its verdict, "
              f"{same_stats['prediction']['psi']:.3f} (KS {same_stats['prediction']['ks']:.3f}) after "
              f"{same_stats['records']} records, alcohol PSI {same_stats['features']['alcohol']['psi']:.3f} "
              f"-> promoted (maxDrift {MAX_DRIFT})")
        print(json.dumps({"shifted": shifted_stats, "same": same_stats}, indent=1)[:3000])
        assert job.stop() == 0



def test_spec_model_baseline_travels_in_the_descriptor_apart_from_verification():
    import copy
    from pathlib import Path

    import yaml

    from scorestream.api import descriptor
    from scorestream.api.v1alpha1 import modelserving as s
    from scorestream.api.verification import Sample
    from scorestream.operator import publish

    example = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "wine-pmml.yaml").read_text())
    body = copy.deepcopy(example["spec"])
    body["model"]["baseline"] = {"uri": "file:///models/wine-sample.jsonl"}
    d = publish.descriptor(s.ModelServingSpec.model_validate(body))
    assert d.baseline == Sample(location="file:///models/wine-sample.jsonl") and d.verification is None
    assert descriptor.decode(d.to_json_bytes()).baseline == d.baseline
    inline = "data:application/x-ndjson," + '{"alcohol": 9.4}'
    body["model"]["baseline"] = {"uri": inline}
    assert publish.descriptor(s.ModelServingSpec.model_validate(body)).baseline == Sample(records=[{"alcohol": 9.4}])
