"""End-to-end latency at a steady paced rate: a record's producer timestamp (CreateTime) to the
broker's append time (LogAppendTime) of its prediction, read from the output topic only; and the
same interval broken down per record by where it is spent (``breakdown``).

The producer paces records at `rate`; the warm-up lasts at least `warmup` seconds and until the
peer keeps up (what it has written trails what was sent by less than `slack` seconds of input),
and `SETTLE` seconds more, then `seconds` more are produced and measured. The settling is what
lets the backlog the peer was still allowed at the check drain before the first measured record,
which would otherwise wait behind it: a start-up queue counted as tail latency, in any peer.
Predictions are matched to their input by the output's `source` {partition, offset}.

Four timestamps per record, all wall clock (``System.currentTimeMillis`` in the broker and in the
peers' JVMs, ``time.time`` here) on one host, each to the millisecond: so every stage is exact to
±1 ms, and the stages add up to the end-to-end latency exactly.
- created: when this producer handed the record to librdkafka (its CreateTime);
- input appended: the broker's append time of the input record (the data topic is stamped with
  LogAppendTime; the delivery report carries it);
- scored: the prediction's ``timings.scoredAt``, taken by the scorer as it writes the record
  (``Records.prediction``: the job's JVM scorer and the Kafka Streams peer alike);
- output appended: the prediction's LogAppendTime (``visible``: its receipt by a read_committed
  consumer).
And the prediction's ``timings.scoringMicros``, the model's own time (PMML4S or TensorFlow Java), to the microsecond:
the part of "to scored" that is scoring; the rest of it is the record waiting in the log, the fetch
and the decode.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from datetime import datetime

from scorestream.tools.demo import feed

import topics as kafka

SETTLE = 1.0  # s from the warm-up's check to the first measured record

# (name, what it lumps together): the intervals between the four timestamps, in order.
STAGES = (
    ("input", "the harness's producer (linger 1 ms) + the request + the broker's append of the input"),
    ("to scored", "the input waiting in the log, the peer's fetch + decode + the model + the prediction record"),
    ("output", "the peer's producer (its linger, batching, the request) + the broker's append of the prediction"),
)


def prewarm(bootstrap: str, data: str, out: str, rate: float, seconds: float, alive=lambda: True) -> int:
    """The peer serves `seconds` at `rate` before paced's own warm-up, and none of it is measured: a
    job that has been running for a while, whose JIT has compiled the code that runs once a batch.
    Returns the records sent, once the peer has written them all."""
    from confluent_kafka import Producer

    values = [feed.wine_json(r) for r in feed.wine_rows()]
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent, t0, next_check = 0, time.monotonic(), 0.0
    while (now := time.monotonic()) - t0 < seconds:
        if now >= next_check:
            next_check = now + 1.0
            if not alive():
                raise RuntimeError("the peer stopped during the pre-warm-up")
        sent = _send(p, data, values, sent, int((now - t0) * rate), lambda err, _: err is not None and errors.append(err))
        p.poll(0)
        time.sleep(0.005)
    p.flush(60)
    if errors:
        raise RuntimeError(f"{len(errors)} records not delivered in the pre-warm-up: {errors[0]}")
    kafka.wait_written(bootstrap, [out], sent, 300, alive, "the peer (pre-warm-up)")
    return sent


def paced(bootstrap: str, data: str, out: str, rate: float, warmup: float, seconds: float, slack: float,
          alive=lambda: True, max_warmup: float = 120.0, visible: bool = False, already: int = 0,
          window: float | None = None) -> dict:
    """``max_warmup``: seconds past ``warmup`` for the peer to catch up before this gives up.
    ``data`` must be stamped with LogAppendTime (topics.make_topics(stamped_data=True)).
    ``visible``: the end of each latency is when a read_committed consumer following the output
    receives the prediction (wall clock), not its append time: what a reader of a transactional
    peer waits for, since its records are appended before their transaction commits.
    ``already``: records the peer has written to `out` before this (prewarm's). ``window``: seconds
    of each measured slice whose own percentiles are given too (a real-time batch: one batch end each)."""
    if visible and already:
        raise ValueError("visible: the follower counts every output from the start, so no pre-warm-up")
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Producer

    rows = feed.wine_rows()
    values = [feed.wine_json(r) for r in rows]
    created: dict[int, int] = {}  # record number (its key) -> CreateTime, until its delivery report
    inputs: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, offset) -> (created, appended)
    errors: list = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
            return
        kind, appended = msg.timestamp()
        if kind != TIMESTAMP_LOG_APPEND_TIME:
            errors.append(f"topic {data} is not stamped with LogAppendTime")
            return
        inputs[(msg.partition(), msg.offset())] = (created.pop(int(msg.key())), appended)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    reader = kafka.consumer(bootstrap)
    follower = kafka.Follower(bootstrap, out).start() if visible else None
    sent, t0 = 0, time.monotonic()
    phase_start, measure_from_ms, warmup_s = t0, None, None
    next_check = t0 + 0.5
    try:
        while True:
            now = time.monotonic()
            if measure_from_ms is None and now >= next_check:
                next_check = now + 0.5
                if not alive():
                    raise RuntimeError("the peer stopped during the warm-up")
                behind = already + sent - kafka.written(reader, [out])
                if now - t0 >= warmup and behind <= rate * slack:
                    measure_from_ms = int((time.time() + SETTLE) * 1000)
                    warmup_s, phase_start = now - t0 + SETTLE, now + SETTLE
                    load = os.getloadavg()[0]
                elif now - t0 > warmup + max_warmup:
                    raise TimeoutError(f"the peer did not keep up with {rate:,.0f} rec/s in {warmup + max_warmup:.0f}s "
                                       f"({behind} records behind)")
            if measure_from_ms is not None and now - phase_start >= seconds:
                break
            sent = _send(p, data, values, sent, int((now - t0) * rate), delivered, created)
            p.poll(0)
            time.sleep(0.001)
        p.flush(60)
        if errors:
            raise RuntimeError(f"{len(errors)} records not delivered: {errors[0]}")
        kafka.wait_written(bootstrap, [out], already + sent, 120, alive, "the peer (latency)")
        if follower is not None:
            follower.wait_for(sent, 120)
    finally:
        reader.close()
        if follower is not None:
            follower.stop()

    stamps, scoring_us, event_time_matches, checked = [], [], 0, 0
    for m in follower.messages if follower is not None else kafka.read_all(bootstrap, out, since_ms=measure_from_ms):
        doc = json.loads(m.value)
        src = doc["source"]
        found = inputs.get((src["partition"], src["offset"]))
        if found is None or found[0] < measure_from_ms:
            continue
        stamps.append((found[0], found[1], _timing_ms(doc, "scoredAt"), m.timestamp))
        scoring = doc["timings"].get("scoringMicros")
        if scoring is not None:  # a peer that does not time its model has no scoring line, not 0 µs
            scoring_us.append(float(scoring))
        if checked < 1000:
            checked += 1
            event_time_matches += _timing_ms(doc, "eventTime") == found[1]
    slices = {}
    for st in stamps if window else ():
        slices.setdefault(int((st[0] - measure_from_ms) / 1000 // window), []).append(st[3] - st[0])
    return {"rate": rate, "warmup_s": warmup_s, "load": load, "seconds": seconds, "records": len(stamps),
            **breakdown(stamps), **({"scoring_us": _percentiles(sorted(scoring_us))} if scoring_us else {}),
            "event_time_is_input_append": f"{event_time_matches}/{checked}",
            "window": window, "windows": [_percentiles(sorted(slices[k])) for k in sorted(slices)]}


def _send(p, data: str, values: list, sent: int, due: int, on_delivery, created: dict | None = None) -> int:
    """Records number `sent` up to `due` (the key; round-robin over 2 partitions), each stamped now;
    returns the count sent. ``created``: each number's CreateTime, until its delivery report."""
    while sent < due:
        stamp = int(time.time() * 1000)
        try:
            p.produce(data, values[sent % len(values)], key=str(sent).encode(), partition=sent % 2,
                      timestamp=stamp, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
            continue
        if created is not None:
            created[sent] = stamp
        sent += 1
    return sent


def breakdown(stamps: list[tuple[int, int, int | None, int]]) -> dict:
    """Per record (created, input appended, scored, output appended), ms: the end-to-end latency's
    p50, p99, p99.9, max and mean; each stage's (STAGES) p50, p99, p99.9 and max; and the tail,
    each stage's median over the records at or above the end-to-end p99, where the p99 is spent."""
    if any(s[2] is None for s in stamps):
        raise ValueError("a prediction without timings.scoredAt: no breakdown")
    total = sorted(s[3] - s[0] for s in stamps)
    e2e = {**_percentiles(total), "mean": statistics.fmean(total)}
    stages = [[s[i + 1] - s[i] for s in stamps] for i in range(len(STAGES))]
    tail = [i for i, s in enumerate(stamps) if s[3] - s[0] >= e2e["p99"]]
    return {
        **e2e,
        "stages": {name: _percentiles(sorted(v)) for (name, _), v in zip(STAGES, stages)},
        "tail": {name: statistics.median(v[i] for i in tail) for (name, _), v in zip(STAGES, stages)},
        "tail_records": len(tail),
    }


def _percentiles(ordered: list[int]) -> dict:
    n = len(ordered)
    return {"p50": ordered[n // 2], "p99": ordered[min(n - 1, int(n * 0.99))],
            "p99.9": ordered[min(n - 1, int(n * 0.999))], "max": ordered[-1]}


def _timing_ms(doc: dict, field: str) -> int | None:
    """timings.<field> as epoch ms: ISO-8601 text (the JVM scorer's, Spark's to_json) or a number of ms."""
    value = (doc.get("timings") or {}).get(field)
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return round(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
    return None


def broker_request_times(broker_pid: int, request: str = "Produce") -> dict:
    """The broker's own time for ``request``s, from its request metrics (BrokerRequestTimes, over
    the Attach API): ms in its request queue, in its handler (a produce request's append), and in
    all; their p50, p99, p99.9 weigh the last minute or so most, their max is since it started."""
    import subprocess

    from jvm_build import bench_jar
    from scorestream.tools.local.broker import java

    out = subprocess.run([java(), "-cp", str(bench_jar()), "dev.scorestream.bench.BrokerRequestTimes", str(broker_pid),
                          request], capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def describe(v: dict) -> list[str]:
    """paced's figures as lines: the end-to-end percentiles, each stage's, and the tail's share."""
    before = v.get("prewarm", (0, 0))
    before = f"after {before[0] / 60:g} min at {before[1]:,.0f} rec/s, " if before[0] else ""
    lines = [f"p50 {v['p50']:>5,}  p99 {v['p99']:>5,}  p99.9 {v['p99.9']:>5,}  max {v['max']:>5,} ms  "
             f"(mean {v['mean']:.1f}; {v['records']:,} records, {before}warm-up {v['warmup_s']:.0f}s, load "
             f"{v['load']:.2f} as measuring began; timings.eventTime = the input's append time: "
             f"{v['event_time_is_input_append']})"]
    for name, what in STAGES:
        s = v["stages"][name]
        lines.append(f"  {name:10} p50 {s['p50']:>5,}  p99 {s['p99']:>5,}  p99.9 {s['p99.9']:>5,}  max {s['max']:>5,} ms"
                     f"   {what}")
    if "scoring_us" in v:
        s = v["scoring_us"]
        lines.append(f"    scoring  p50 {s['p50']:>5,.0f}  p99 {s['p99']:>5,.0f}  p99.9 {s['p99.9']:>5,.0f}  max {s['max']:>5,.0f} µs"
                     "   of 'to scored', the model's own time (timings.scoringMicros); the rest waits in the log")
    if "broker" in v:
        b = v["broker"]
        lines.append("    the broker's part of a produce request (input and output alike; its request metrics, the last"
                     " minute or so), p50 · p99 · p99.9 ms: "
                     + ", ".join(f"{what} {b[k]['50thPercentile']:.1f} · {b[k]['99thPercentile']:.1f} · {b[k]['999thPercentile']:.1f}"
                                 for k, what in (("RequestQueueTimeMs", "queued"), ("LocalTimeMs", "appending"),
                                                 ("TotalTimeMs", "in all"))))
    lines.append(f"  the {v['tail_records']:,} records at or above p99, median of each stage: "
                 + ", ".join(f"{name} {v['tail'][name]:g} ms" for name, _ in STAGES))
    if len(v.get("windows") or ()) > 1:
        lines.append(f"  each {v['window']:g} s of it, p99 · max: "
                     + ", ".join(f"{w['p99']:,} · {w['max']:,}" for w in v["windows"]) + " ms")
    return lines
