"""End-to-end latency at a steady paced rate: a record's producer timestamp (CreateTime) to the
broker's append time (LogAppendTime) of its prediction, read from the output topic only.

The producer paces records at `rate`; the warm-up lasts at least `warmup` seconds and until the
peer keeps up (what it has written trails what was sent by less than `slack` seconds of input),
then `seconds` more are produced and measured. Predictions are matched to their input by the
output's `source` {partition, offset}; the input's CreateTime comes from the delivery reports.
"""

from __future__ import annotations

import json
import statistics
import time
from datetime import datetime

from scorestream.tools.demo import feed

import topics as kafka


def paced(bootstrap: str, data: str, out: str, rate: float, warmup: float, seconds: float, slack: float,
          alive=lambda: True, max_warmup: float = 120.0, visible: bool = False) -> dict:
    """``visible``: the end of each latency is when a read_committed consumer following the output
    receives the prediction (wall clock), not its append time: what a reader of a transactional
    peer waits for, since its records are appended before their transaction commits."""
    from confluent_kafka import Producer

    rows = feed.wine_rows()
    values = [feed.wine_json(r) for r in rows]
    created: dict[tuple[int, int], int] = {}
    acked: list[int] = []  # ms from CreateTime to the producer's delivery report: the harness's share
    errors: list = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            ts = msg.timestamp()[1]
            created[(msg.partition(), msg.offset())] = ts
            if measure_from_ms is not None and ts >= measure_from_ms:
                acked.append(int(time.time() * 1000) - ts)

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
                behind = sent - kafka.written(reader, [out])
                if now - t0 >= warmup and behind <= rate * slack:
                    measure_from_ms, warmup_s, phase_start = int(time.time() * 1000), now - t0, now
                elif now - t0 > max_warmup:
                    raise TimeoutError(f"the peer did not keep up with {rate:,.0f} rec/s in {max_warmup:.0f}s "
                                       f"({behind} records behind)")
            if measure_from_ms is not None and now - phase_start >= seconds:
                break
            due = int((now - t0) * rate)
            while sent < due:
                try:
                    p.produce(data, values[sent % len(values)], key=str(sent).encode(), partition=sent % 2,
                              on_delivery=delivered)
                    sent += 1
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
            time.sleep(0.001)
        p.flush(60)
        if errors:
            raise RuntimeError(f"{len(errors)} records not delivered: {errors[0]}")
        kafka.wait_written(bootstrap, [out], sent, 120, alive, "the peer (latency)")
        if follower is not None:
            follower.wait_for(sent, 120)
    finally:
        reader.close()
        if follower is not None:
            follower.stop()

    latencies, event_time_matches, checked = [], 0, 0
    for m in follower.messages if follower is not None else kafka.read_all(bootstrap, out):
        doc = json.loads(m.value)
        src = doc["source"]
        ts = created.get((src["partition"], src["offset"]))
        if ts is None or ts < measure_from_ms:
            continue
        latencies.append(m.timestamp - ts)
        if checked < 1000:
            checked += 1
            event_time_matches += _event_time_ms(doc) == ts
    latencies.sort()
    acked.sort()
    n = len(latencies)
    return {
        "ack_p50": acked[len(acked) // 2], "ack_p99": acked[int(len(acked) * 0.99)],
        "rate": rate, "warmup_s": warmup_s, "seconds": seconds, "records": n,
        "p50": latencies[n // 2], "p99": latencies[min(n - 1, int(n * 0.99))], "max": latencies[-1],
        "mean": statistics.fmean(latencies),
        "event_time_is_create_time": f"{event_time_matches}/{checked}",
    }


def _event_time_ms(doc: dict) -> int | None:
    """timings.eventTime as epoch ms: ISO-8601 text (Spark's to_json) or a number of ms."""
    value = (doc.get("timings") or {}).get("eventTime")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return round(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
    return None
