"""The autoscaler's decision function over scripted scenarios: what it decides, step by step."""

from __future__ import annotations

import pytest

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import autoscaler as a

POLICY = s.AutoscalingSpec.model_validate({"minReplicas": 1, "maxReplicas": 8, "targetLagSeconds": 30,
                                           "targetUtilization": 0.8, "stabilizationWindow": "60s",
                                           "scaleDownCooldown": "120s", "maxStep": 2})
PER_EXECUTOR = 1000.0  # records per busy second of one executor


def run(scenario, start=1, cap=None, policy=POLICY, every=10.0):
    """Feed (input_rate, lag) samples every `every` seconds; return the replicas decided each step,
    and the job follows each decision at once (as the operator's live scaling does)."""
    current, window, last_change, decided = start, [], None, []
    for i, (rate, lag) in enumerate(scenario):
        now = i * every
        d = a.decide(policy, a.Load(current, rate, PER_EXECUTOR, lag), current, window, last_change, now, cap)
        window.append((now, d.recommended))
        if d.replicas != current:
            last_change = now
        current = d.replicas
        decided.append(current)
    return decided


def test_steady_load_settles_and_stays():
    # 2,000 rec/s at 80% of 1,000 rec/s per executor: 2.5 -> 3 executors, reached in one step.
    assert run([(2000, 0)] * 10) == [3] * 10


def test_a_burst_scales_up_in_bounded_steps_at_once():
    assert run([(500, 0), (500, 0), (6000, 0), (6000, 0), (6000, 0)]) == [1, 1, 3, 5, 7]


def test_lag_is_drained_too():
    # No new records, but 60,000 behind: 2,000 rec/s to drain in 30 s -> 3 executors.
    assert run([(0, 60_000)], start=1)[0] == 3


def test_drained_lag_scales_down_after_the_window_and_the_cooldown():
    decided = run([(2000, 60_000)] + [(800, 0)] * 30, start=3)
    # Up to 5 for the lag (a bounded step); down only after the 120 s cooldown, then in steps of
    # two with the cooldown between them: 5 -> 3 at 120 s, 3 -> 1 at 240 s.
    assert decided[0] == 5
    assert decided[1:12] == [5] * 11
    assert decided[12:24] == [3] * 12
    assert decided[24:] == [1] * 7


def test_the_partitions_cap_the_executors():
    d = a.decide(POLICY, a.Load(2, 20_000, PER_EXECUTOR, 0), 2, [], None, 0.0, cap=4)
    assert d.replicas == 4 and "partitions" in d.reason
    assert run([(20_000, 0)] * 5, start=2, cap=4) == [4] * 5


def test_a_flapping_input_does_not_flap_the_job():
    flapping = [(3000, 0), (300, 0)] * 15  # needs 3.75 executors half of the time, 0.4 the other half
    decided = run(flapping, start=1)
    changes = sum(1 for x, y in zip(decided, decided[1:]) if x != y)
    assert decided[:3] == [3, 3, 4] and set(decided[2:]) == {4}, decided
    assert changes == 1


def test_without_figures_it_keeps_what_runs():
    d = a.decide(POLICY, a.Load(3, None, None, None), 3, [], None, 0.0)
    assert d.replicas == 3 and "no load figures" in d.reason


@pytest.mark.parametrize("bad", [{"minReplicas": 5, "maxReplicas": 2}, {"maxReplicas": 2, "maxStep": 0},
                                 {"maxReplicas": 2, "scaleDownCooldown": "soon"}])
def test_a_bad_policy_is_refused(bad):
    with pytest.raises(ValueError):
        s.AutoscalingSpec.model_validate(bad)


def test_an_idle_job_reports_no_arrivals_so_it_can_be_scaled_down(monkeypatch):
    from scorestream.runtime import stats as st
    from scorestream.runtime.models import ModelRegistry

    clock = [1000.0]
    monkeypatch.setattr(st.time, "time", lambda: clock[0])
    job = st.ServingStats(ModelRegistry())
    for total in (0, 5000, 10_000):  # batches while 1,000 rec/s arrive
        job.note_end_offsets(total)
        clock[0] += 5
    job.recent_batches.append((clock[0], 5000, 1.0, 2))
    job.executors = 2
    assert job.load()["inputRate"] == 1000
    # Then nothing arrives: no batch for a minute, the source's triggers find nothing new.
    for _ in range(120):
        clock[0] += 0.5
        job.note_no_new_data()
    figures = job.load()
    assert figures["inputRate"] == 0
    load = a.Load(2, figures["inputRate"], figures["processingRatePerExecutor"], 0)
    assert a.decide(POLICY, load, 2, [], None, clock[0]).replicas == 1
