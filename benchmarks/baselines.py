"""Baselines in Python on confluent-kafka: (raw) consume + produce, no scoring, in 1 or 2
processes — the machine's ceiling for this client; (a) the report's processor ported the obvious
way: consume, pypmml predict per record, produce."""

from __future__ import annotations

import json
import multiprocessing as mp
import time

from scorestream.tools.demo import feed
from scorestream.tools.local.broker import create_topics


def _consume_produce(bootstrap: str, topic: str, out: str, partitions: list[int], n: int, score, result) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}", "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    c.assign([TopicPartition(topic, part, 0) for part in partitions])
    done, t0 = 0, None
    while done < n:
        msgs = c.consume(1000, timeout=1.0)
        if t0 is None and msgs:
            t0 = time.perf_counter()
        for m in msgs:
            if m.error():
                continue
            value = m.value() if score is None else score(m.value())
            while True:
                try:
                    p.produce(out, value, key=m.key())
                    break
                except BufferError:
                    p.poll(0.05)
            done += 1
            if done >= n:
                break
        p.poll(0)
    p.flush(60)
    result.put((done, time.perf_counter() - t0))
    c.close()


def raw_rate(bootstrap: str, topic: str, n: int, processes: int) -> float:
    create_topics(bootstrap, {f"raw-out-{processes}": 2})
    q: mp.Queue = mp.Queue()
    parts = [[p for p in range(2) if p % processes == i] for i in range(processes)]
    share = [n // 2 * len(ps) for ps in parts]
    procs = [
        mp.Process(target=_consume_produce, args=(bootstrap, topic, f"raw-out-{processes}", ps, k, None, q))
        for ps, k in zip(parts, share)
    ]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(d for d, _ in results) / max(t for _, t in results)


def per_record_rate(bootstrap: str, topic: str, pmml: bytes, n: int) -> float:
    from pypmml import Model

    model = Model.fromString(pmml.decode())
    fields = list(feed.WINE_COLUMNS)

    def score(value: bytes) -> bytes:
        rec = json.loads(value)
        pred = dict(model.predict({f: float(rec[f]) for f in fields}))
        return json.dumps({"prediction": pred, "dataType": rec["dataType"]}).encode()

    create_topics(bootstrap, {"perrecord-out": 2})
    q: mp.Queue = mp.Queue()
    # In this process: pypmml's JVM gateway does not survive a fork.
    _consume_produce(bootstrap, topic, "perrecord-out", [0, 1], n, score, q)
    done, seconds = q.get()
    return done / seconds


def pypmml_agreement(pmml: bytes, outputs, sample: int = 200) -> tuple[int, int]:
    """(agreeing, checked): a peer's predictions against pypmml's on the same records.

    `outputs` are output messages whose key is the input's key i (`topics.preload`: record i is
    wine row i mod 1599); a prediction agrees when its label and class probabilities are pypmml's.
    """
    from pypmml import Model

    model = Model.fromString(pmml.decode())
    rows = feed.wine_rows()
    step = max(1, len(outputs) // sample)
    agree = checked = 0
    for m in outputs[::step][:sample]:
        out = json.loads(m.value)
        rec = json.loads(feed.wine_json(rows[int(m.key) % len(rows)]))
        want = dict(model.predict({f: rec[f] for f in feed.WINE_COLUMNS}))
        label = next(v for k, v in want.items() if k.startswith("predicted_"))
        probs = {k: v for k, v in want.items() if k.startswith("probability")}
        got = out.get("outputs") or {}
        checked += 1
        same = all(isinstance(got.get(k), (int, float)) and abs(got[k] - v) < 1e-9 for k, v in probs.items())
        agree += str(out.get("label")) == str(label) and same
    return agree, checked
