"""A bounded fuzz run against the running job (#15): bad records of many kinds interleaved with
good ones on the data topic, and bad model messages on the models topic.

What must hold: the job keeps serving; every input offset comes out exactly once, in the output
topic or the dead-letter topic (none lost, none doubled: there is no restart); every dead letter
carries its reason; good records get the reference's prediction; the serving model is unchanged
and every bad model message is listed as rejected, with its identity where it could be read.

Everything is drawn from one seeded ``random.Random`` (``SEED``; ``SCORESTREAM_FUZZ_SEED``
overrides it), so a failure is replayed by running the module again with the seed it printed.
JSON records go through a real job (Spark local mode, the test broker). Protobuf records go through
the JVM scorer on a batch DataFrame (the contract path of tests/test_scorer_contract.py): the same
decode and scoring code without a second streaming job, which would double the module's time.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter, defaultdict

import pytest

from harness.reference import pmml4s_outputs
from scorestream.api import messages
from scorestream.tools.demo import feed, models
from scorestream.tools.local.rss import ProcessTreeMemory

from test_artifact_safety import long_name_bomb, zip_bomb_bytes

pytestmark = [pytest.mark.spark, pytest.mark.broker]

SEED = int(os.environ.get("SCORESTREAM_FUZZ_SEED", "15"))
GOOD = 1000
INLINE_LIMIT = 256 << 10  # the job's maxInlineBytes here: "near" and "above" stay cheap to send
BROKER_LIMIT = 1048588  # Apache Kafka's default message.max.bytes, the test broker's

ROWS = feed.wine_rows()


@pytest.fixture(scope="module")
def tree_pmml() -> bytes:
    return models.tree_pmml()


@pytest.fixture(scope="module")
def reference(tree_pmml):
    """PMML4S called directly (pypmml): the prediction each good row must get."""
    return [o["predicted_quality"] for o in pmml4s_outputs(tree_pmml, ROWS[:GOOD])]


# -- what is sent ----------------------------------------------------------------------------------
# Each record: (kind, key, value, expect) where expect is ("out", row) for a record that must be
# scored as ROWS[row] is, or ("dlq", stage, reason-part) for one that must be dead-lettered.


def _wine(row: int, **extra) -> dict:
    doc = {"dataType": "wine", **dict(zip(feed.WINE_COLUMNS, ROWS[row][:11]))}
    doc.update(extra)
    return doc


def _deep(rng: random.Random, depth: int) -> bytes:
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return (opener * depth + "1" + closer * depth).encode()


def bad_records(rng: random.Random) -> list[tuple[str, bytes | None, bytes | None, tuple]]:
    out: list[tuple[str, bytes | None, bytes | None, tuple]] = []

    def add(kind, value, expect, key=None):
        out.append((kind, key if key is not None else f"{kind}-{len(out)}".encode(), value, expect))

    for _ in range(300):
        raw = rng.randbytes(rng.randint(1, 300))
        add("random bytes", raw, ("dlq", "decode", ""))
    for _ in range(60):
        good = json.dumps(_wine(rng.randrange(GOOD))).encode()
        add("truncated JSON", good[: rng.randint(0, len(good) - 1)], ("dlq", "decode", ""))
    for _ in range(60):
        good = bytearray(json.dumps(_wine(rng.randrange(GOOD))).encode())
        for _ in range(rng.randint(1, 4)):  # bit flips that break the syntax or a value
            good[rng.randrange(len(good))] = rng.choice(b'{}[]":,\x00\xff')
        add("mutated JSON", bytes(good), ("either",))
    for _ in range(40):
        add("deep JSON", _deep(rng, rng.choice([600, 5_000, 100_000])), ("dlq", "decode", ""))
    for _ in range(20):
        # A record that would be good but for one field nested past the parser's depth limit.
        add("deep field", json.dumps(_wine(rng.randrange(GOOD))).encode()[:-1] + b', "x": ' + _deep(rng, 2_000) + b"}",
            ("dlq", "decode", "nesting depth"))
    for _ in range(8):
        # Many fields, none the model's: a huge object still gets a reason.
        doc = {f"k{rng.getrandbits(40):x}": rng.random() for _ in range(rng.randint(5_000, 30_000))}
        add("huge JSON", json.dumps({"dataType": "wine", **doc}).encode(), ("dlq", "validate", "missing field"))
    for _ in range(8):
        row = rng.randrange(GOOD)
        doc = _wine(row, **{f"junk{i}": i for i in range(rng.randint(5_000, 20_000))})
        add("huge JSON, good fields", json.dumps(doc).encode(), ("out", row))
    for _ in range(30):
        row = rng.randrange(GOOD)
        field = rng.choice(feed.WINE_COLUMNS)
        value = rng.choice(['"12.5"', "null", "true", "[1]", '{"v": 1}', '""'])
        doc = json.dumps(_wine(row)).replace(f'"{field}": {json.dumps(ROWS[row][feed.WINE_COLUMNS.index(field)])}',
                                             f'"{field}": {value}')
        add("wrong field type", doc.encode(), ("dlq", "validate", f"field '{field}' is not a number"))
    for _ in range(20):
        row = rng.randrange(GOOD)
        add("number overflow", json.dumps(_wine(row)).replace(", \"alcohol\"", ', "alcohol": 1e400, "x"').encode(),
            ("dlq", "validate", "field 'alcohol' is not a number"))
    for _ in range(20):
        row = rng.randrange(GOOD)
        dt = rng.choice(["beer", "", "WINE", "wine\x00", "🍷" * 50])
        add("unknown dataType", json.dumps(_wine(row, dataType=dt)).encode(), ("dlq", "route", "dataType"))
    for _ in range(10):
        add("no value", None, ("dlq", "decode", "record has no value"))
        add("empty value", b"", ("dlq", "decode", "not a JSON object"))
    for _ in range(2):
        # 1 MB values: junk, and a good record carrying a 1 MB string.
        add("1 MB value", rng.randbytes(1_000_000), ("dlq", "decode", ""))
        row = rng.randrange(GOOD)
        add("1 MB value, good fields", json.dumps(_wine(row, pad="x" * 1_000_000)).encode(), ("out", row))
    for _ in range(2):
        # A key as big as a value: the prediction repeats it, escaped (random bytes grow by about
        # a quarter), so with the key itself the record is ~1.35 MB, over Kafka's default limits.
        row = rng.randrange(GOOD)
        add("400 KB random key", json.dumps(_wine(row)).encode(), ("dlq", "validate", "record key of 400000 bytes"),
            key=rng.randbytes(400_000))
    for _ in range(2):
        # As large as the broker takes on the data topic: with a dead letter's headers it would not
        # fit, so it goes without its value (header scorestream.value.dropped).
        add("value at the broker's limit", rng.randbytes(BROKER_LIMIT - 200), ("dlq", "decode", ""))
    for _ in range(2):
        # #30: a dataType of 600,000 characters is named in the reason; a header of that size made
        # the dead letter larger than the sink takes, the query failed, and a restart met it again.
        row = rng.randrange(GOOD)
        add("600,000-char dataType", json.dumps(_wine(row, dataType="d" * 600_000)).encode(), ("dlq", "route", "dataType"))
        add("600,000-char dataType, 440 KB key", json.dumps(_wine(row, dataType="k" * 600_000)).encode(),
            ("dlq", "route", "dataType"), key=rng.randbytes(440_000))
    for _ in range(2):
        # A key as large as the broker takes: even without its value the dead letter would not fit,
        # so it goes without its key too (scorestream.key.dropped).
        add("key at the broker's limit", b"{", ("dlq", "decode", ""), key=rng.randbytes(BROKER_LIMIT - 400))
        # Headers as large as the broker takes: the dead letter sheds them (scorestream.headers.dropped).
        add("headers at the broker's limit", b"{", ("dlq", "decode", ""))
        OWN_HEADERS[out[-1][1]] = [("big", rng.randbytes(BROKER_LIMIT - 1200)), ("small", b"s")]
    return out


# Headers a record is produced with, by its key (the few kinds that carry any).
OWN_HEADERS: dict[bytes, list[tuple[str, bytes]]] = {}


def good_records() -> list[tuple[str, bytes, bytes, tuple]]:
    return [("good", f"good-{i}".encode(), json.dumps(_wine(i)).encode(), ("out", i)) for i in range(GOOD)]


def interleave(rng: random.Random, good: list, bad: list) -> list:
    """Bad records scattered among good ones, in an order the seed decides."""
    mixed = good + bad
    rng.shuffle(mixed)
    return mixed


def produce(bootstrap: str, topic: str, records: list, partitions: int) -> dict[tuple[int, int], int]:
    """Produce in order, round-robin over partitions; returns (partition, offset) -> index."""
    p = feed.producer(bootstrap, **{"message.max.bytes": 2 * BROKER_LIMIT, "linger.ms": 20})
    where: dict[tuple[int, int], int] = {}
    errors: list = []

    def cb(i):
        def done(err, msg):
            if err is not None:
                errors.append((i, err))
            else:
                where[(msg.partition(), msg.offset())] = i
        return done

    for i, (_, key, value, _) in enumerate(records):
        while True:
            try:
                p.produce(topic, value, key=key, partition=i % partitions, on_delivery=cb(i),
                          headers=OWN_HEADERS.get(key))
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)
    assert not errors, f"the broker refused {len(errors)} fuzz records: {errors[:3]}"
    return where


# -- the models topic ------------------------------------------------------------------------------


def bad_model_messages(rng: random.Random, s, tree_pmml: bytes) -> list[tuple[str, bytes, bytes, list, str | None, str]]:
    """(kind, key, value, headers, identity expected in the rejection or None, reason part)."""
    key = s.key("wine")
    ctype = [("content-type", b"application/json")]
    out = []

    def descriptor(name, content, **extra):
        d = models.descriptor(name, "1", "pmml", content)
        return json.dumps({**json.loads(d.to_json_bytes()), **extra}).encode()

    whole = descriptor("fz-trunc", tree_pmml)
    for cut in sorted(rng.sample(range(1, len(whole) - 1), 3)):
        out.append(("truncated JSON descriptor", key, whole[:cut], ctype, None, "not valid JSON"))
    proto = messages.ModelDescriptorProto(name="fz-proto", dataType="wine", modeltype=2, data=tree_pmml)
    raw = proto.SerializeToString()
    # Cut inside the data field (the name and dataType come first): unreadable as a message.
    for cut in sorted(rng.sample(range(len(raw) - len(tree_pmml) + 10, len(raw) - 1), 2)):
        out.append(("truncated protobuf descriptor", key, raw[:cut], [], None, "not a JSON descriptor nor a protobuf"))
    junk = b"<PMML>" + b" " * (INLINE_LIMIT - 20) + b"</PMML>"
    out.append(("inline model near the limit", key, descriptor("fz-near", junk[:INLINE_LIMIT]), ctype, "fz-near:1",
                "pmml model does not load"))
    out.append(("inline model above the limit", key, descriptor("fz-over", b"x" * (INLINE_LIMIT + 1)), ctype,
                "fz-over:1", f"exceeds maxInlineBytes {INLINE_LIMIT}"))
    big = b"x" * (700 << 10)  # base64 makes it ~930 KB: near the broker's own limit
    out.append(("inline model near the broker's limit", key, descriptor("fz-huge", big), ctype, "fz-huge:1",
                "exceeds maxInlineBytes"))
    for _ in range(3):
        out.append(("random bytes", key, rng.randbytes(rng.randint(1, 2000)), [], None, ""))
    out.append(("wrong dataType (descriptor says beer)", key, descriptor("fz-beer", tree_pmml, dataType="beer"), ctype,
                "fz-beer:1", "does not match the descriptor"))
    out.append(("dataType not a string", key, descriptor("fz-dt", tree_pmml, dataType=7), ctype, "fz-dt:1",
                "dataType"))
    out.append(("deep JSON descriptor", key, b'{"name": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", ctype, None,
                "nested too deeply"))
    out.append(("data not base64", key, descriptor("fz-b64", tree_pmml, data="@@not base64@@"), ctype, "fz-b64:1",
                "not base64"))
    # Archive bombs, inline (#30): 200 MiB of declared GNU long name in ~200 KB of tar.gz, and
    # ~200 KB of zip unpacking to 200 MB.
    for name, archive, part in (("fz-tarbomb", long_name_bomb(200), "long name or pax header"),
                                ("fz-zipbomb", zip_bomb_bytes(), "unpacks to more than")):
        out.append((f"archive bomb ({name})", key, models.descriptor(name, "1", "tensorflow", archive).to_json_bytes(),
                    ctype, f"{name}:1", part))
    return out


def _headers(msg) -> dict[str, str]:
    return {k: (v or b"").decode(errors="replace") for k, v in (msg.headers() or [])}


def test_fuzz_the_running_job(serving, tree_pmml, reference):
    rng = random.Random(SEED)
    print(f"\nfuzz seed {SEED} (SCORESTREAM_FUZZ_SEED={SEED} replays it)")
    t0 = time.monotonic()
    s = serving(artifacts={"maxInlineBytes": INLINE_LIMIT})
    s.publish(models.descriptor("tree", "1", "pmml", tree_pmml))
    job = s.start().wait_ready()
    started = time.monotonic() - t0
    memory = ProcessTreeMemory(job.proc.pid).start()

    records = interleave(rng, good_records(), bad_records(rng))
    half = len(records) // 2
    where = produce(s.broker.bootstrap, s.topics["data"], records[:half], s.partitions)

    # The models topic, while the first half is being scored.
    bad_models = bad_model_messages(rng, s, tree_pmml)
    p = feed.producer(s.broker.bootstrap, **{"message.max.bytes": 2 * BROKER_LIMIT})
    for _, key, value, headers, _, _ in bad_models:
        p.produce(s.topics["models"], value, key=key, headers=headers)
    assert p.flush(30) == 0

    rest = produce(s.broker.bootstrap, s.topics["data"], records[half:], s.partitions)
    where.update({k: i + half for k, i in rest.items()})
    assert len(where) == len(records)
    job.wait_records(len(records), timeout=120)

    out = s.read("out", expect=sum(1 for r in records if r[3][0] == "out"))
    dead = s.read("dlq", expect=sum(1 for r in records if r[3][0] == "dlq"))

    # Every input offset exactly once in output ∪ dead letters.
    seen: Counter = Counter()
    outcome: dict[int, tuple] = {}
    for m in out:
        o = json.loads(m.value())
        at = (o["source"]["partition"], o["source"]["offset"])
        seen[at] += 1
        outcome[where[at]] = ("out", o)
    for m in dead:
        h = _headers(m)
        at = (int(h["scorestream.source.partition"]), int(h["scorestream.source.offset"]))
        seen[at] += 1
        outcome[where[at]] = ("dlq", h, m)
    lost = set(where) - set(seen)
    doubled = {k: n for k, n in seen.items() if n > 1}
    assert not lost, f"{len(lost)} input offsets in neither topic, e.g. {[records[where[k]][0] for k in list(lost)[:5]]}"
    assert not doubled, f"offsets written twice: {list(doubled)[:5]}"

    table: dict[str, Counter] = defaultdict(Counter)
    reasons: dict[str, Counter] = defaultdict(Counter)
    shed: dict[str, set] = defaultdict(set)  # what dead letters of a kind went without
    problems = []
    for i, (kind, key, value, expect) in enumerate(records):
        got = outcome[i]
        table[kind]["sent"] += 1
        if got[0] == "out":
            table[kind]["scored"] += 1
            o = got[1]
            if expect[0] == "out":
                if o["label"] != reference[expect[1]]:
                    problems.append(f"{kind} #{i}: label {o['label']} != reference {reference[expect[1]]}")
                if key is not None and o.get("key") != key.decode(errors="replace"):
                    problems.append(f"{kind} #{i}: the prediction's key is not the record's")
            elif expect[0] == "dlq":
                problems.append(f"{kind} #{i}: scored, expected a dead letter ({expect[1]})")
            elif o["label"] is None:
                problems.append(f"{kind} #{i}: scored without a label")
        else:
            _, h, m = got
            table[kind]["dead-lettered"] += 1
            reason, stage = h.get("scorestream.reason", ""), h.get("scorestream.stage", "")
            reasons[kind][f"{stage}: {_short(reason)}"] += 1
            if not reason:
                problems.append(f"{kind} #{i}: dead letter without a reason")
            own = OWN_HEADERS.get(key, [])
            size = len(key or b"") + len(value or b"") + sum(len(k) + len(v) for k, v in own)
            if any(len(v or b"") > 2004 for k, v in (m.headers() or []) if k.startswith("scorestream.")):
                problems.append(f"{kind} #{i}: a header of the job's over its bound")
            shed[kind] |= {k.removeprefix("scorestream.") for k in h if k.endswith(".dropped")}
            if "scorestream.value.dropped" in h:
                # Only what could not fit the sink's max.request.size (1,048,576) with the headers.
                if m.value() or int(h["scorestream.value.dropped"]) != len(value) or size < 1_040_000:
                    problems.append(f"{kind} #{i}: value dropped from a dead letter: {h['scorestream.value.dropped']}")
            elif m.value() != value and not (value is None and not m.value()):
                problems.append(f"{kind} #{i}: the dead letter is not the record unchanged")
            if "scorestream.key.dropped" in h:
                if m.key() is not None or int(h["scorestream.key.dropped"]) != len(key) or len(key) < 1_040_000:
                    problems.append(f"{kind} #{i}: key dropped from a dead letter: {h['scorestream.key.dropped']}")
            elif m.key() != key:
                problems.append(f"{kind} #{i}: the dead letter's key is not the record's")
            if "scorestream.headers.dropped" in h:
                if int(h["scorestream.headers.dropped"]) != len(own) or any(not k.startswith("scorestream.") for k in h):
                    problems.append(f"{kind} #{i}: headers dropped from a dead letter: {h['scorestream.headers.dropped']}")
            elif own and [(k, v) for k, v in (m.headers() or []) if not k.startswith("scorestream.")] != own:
                problems.append(f"{kind} #{i}: the dead letter lost the record's own headers")
            if expect[0] == "out":
                problems.append(f"{kind} #{i}: dead-lettered ({stage}: {reason}), expected scored")
            elif expect[0] == "dlq":
                if stage != expect[1] or expect[2] not in reason:
                    problems.append(f"{kind} #{i}: {stage}: {reason!r}, expected {expect[1]}: {expect[2]!r}")

    # The models topic: the serving model unchanged, every bad message rejected.
    state = _wait_rejections(job, len(bad_models))
    assert state["serving"]["wine"]["name"] == "tree" and state["serving"]["wine"]["version"] == "1", state["serving"]
    rejected = state["rejected"]
    model_rows = []
    for (kind, _, _, _, identity, part), r in zip(bad_models, rejected):
        model_rows.append((kind, r["model"], r["reason"]))
        if part not in r["reason"]:
            problems.append(f"model message {kind!r}: rejected as {r['reason']!r}, expected {part!r}")
        if identity is not None and r["model"] != identity:
            problems.append(f"model message {kind!r}: rejected as {r['model']!r}, expected {identity!r}")
    rejected_total = _metric(_raw(job, "/metrics"), "scorestream_models_rejected_total")

    # Still serving: ready, and a record sent after all this is scored by the same model.
    assert job.get("/readyz")["ready"] is True
    after = feed.wine_records(ROWS[:5], start=10_000)
    s.produce(after)
    job.wait_records(len(records) + len(after), timeout=60)
    tail = [json.loads(m.value()) for m in s.read("out", expect=len(out) + len(after))][len(out):]
    assert {(o["model"]["name"], o["model"]["version"]) for o in tail} == {("tree", "1")} and len(tail) == 5

    _print_table(table, reasons, model_rows, rejected_total, time.monotonic() - t0, started)
    memory.stop()
    print(f"peak RSS of the job (MB, by kind of process): {memory.peaks_mb()}")
    assert not problems, "\n".join(problems[:30])
    # What could not fit the sink was shed, in its order, and nothing else was.
    assert {k: v for k, v in shed.items() if v} == {
        "value at the broker's limit": {"value.dropped"},
        "key at the broker's limit": {"value.dropped", "headers.dropped", "key.dropped"},
        "headers at the broker's limit": {"value.dropped", "headers.dropped"}}, shed
    assert len(rejected) == len(bad_models) and rejected_total == len(bad_models)
    assert job.stop() == 0


def _short(reason: str) -> str:
    """A reason without the parts that vary by record (offsets, characters), for counting."""
    import re

    reason = re.sub(r"\(code \d+\)|code \d+|'.'|\(CTRL-CHAR.*?\)|at \d+|line: \d+, column: \d+", "…", reason)
    return reason[:90]


def _raw(job, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(job.url + path, timeout=5) as r:
        return r.read().decode()


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def _wait_rejections(job, n: int, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = job.get("/models")
        if len(state["rejected"]) >= n or time.monotonic() > deadline:
            return state
        time.sleep(0.3)


def _print_table(table, reasons, model_rows, rejected_total, seconds, started) -> None:
    print(f"\n{'kind':<30} {'sent':>6} {'scored':>7} {'dead-lettered':>14}   reasons (stage: reason × n)")
    totals = Counter()
    for kind in sorted(table, key=lambda k: (k != "good", k)):
        c = table[kind]
        totals.update(c)
        why = "; ".join(f"{r} ×{n}" for r, n in reasons[kind].most_common(3))
        more = len(reasons[kind]) - 3
        print(f"{kind:<30} {c['sent']:>6} {c['scored']:>7} {c['dead-lettered']:>14}   {why}"
              + (f" (+{more} more)" if more > 0 else ""))
    print(f"{'total':<30} {totals['sent']:>6} {totals['scored']:>7} {totals['dead-lettered']:>14}")
    if model_rows is None:
        return
    print(f"\nmodel messages: {len(model_rows)} sent, {len(model_rows)} rejected "
          f"(scorestream_models_rejected_total {rejected_total:g}); serving model unchanged: tree:1")
    for kind, label, reason in model_rows:
        print(f"  {kind:<40} {label:<22} {reason[:90]}")
    print(f"\njob ready after {started:.1f}s; whole run {seconds:.1f}s")


# -- protobuf records, through the JVM scorer's contract path --------------------------------------

KAFKA_ROW = "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, " \
            "partition int, offset long, timestamp timestamp"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def bad_protobuf(rng: random.Random) -> list[tuple[str, bytes | None, tuple]]:
    out: list[tuple[str, bytes | None, tuple]] = []
    for _ in range(300):
        out.append(("random bytes", rng.randbytes(rng.randint(1, 300)), ("dlq", "", "")))
    for _ in range(60):
        good = feed.wine_proto(ROWS[rng.randrange(GOOD)])
        out.append(("truncated", good[: rng.randint(0, len(good) - 1)], ("either",)))
    for _ in range(60):
        b = bytearray(feed.wine_proto(ROWS[rng.randrange(GOOD)]))
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(("mutated", bytes(b), ("either",)))
    base = feed.wine_proto(ROWS[0])
    for length in (0x7FFFFFFF, 0x7FFFFFF0, (1 << 32) + 3, (1 << 63) + 5):
        # An unknown length-delimited field claiming more bytes than there are: its length must
        # not wrap around an int into a plausible one.
        out.append(("length past 2^31", base + _varint(20 << 3 | 2) + _varint(length) + b"abc",
                    ("dlq", "decode", "truncated protobuf field 20")))
    for value in (float("nan"), float("inf"), float("-inf")):
        rec = messages.WineRecord(dataType="wine", **dict(zip(messages.WINE_FIELDS, ROWS[1][:11])))
        rec.alcohol = value
        out.append(("non-finite double", rec.SerializeToString(), ("dlq", "validate", "field 'alcohol' is not a number")))
    for wire in (3, 4, 6, 7):
        out.append(("unsupported wire type", base + _varint(21 << 3 | wire), ("dlq", "decode", f"wire type {wire}")))
    out.append(("alcohol as a varint", base + _varint(11 << 3 | 0) + _varint(13),
                ("dlq", "validate", "field 'alcohol' is not a number")))
    for dt in ("beer", "", "wine\x00"):
        out.append(("unknown dataType", feed.wine_proto(ROWS[2], dt), ("dlq", "", "dataType")))
    out.append(("no value", None, ("dlq", "decode", "record has no value")))
    out.append(("1 MB random", rng.randbytes(1_000_000), ("dlq", "decode", "")))
    return out


def test_fuzz_protobuf_records_through_the_scorer(jvm_session, tree_pmml, reference, tmp_path):
    """The protobuf decoder (Protobuf.java) on the same kinds of abuse, scored by the JVM scorer
    the job uses, on a batch DataFrame: every row out or dead-lettered with a reason, good rows
    as the reference scores them."""
    from datetime import datetime, timezone

    from scorestream.api.scoring import Route, RoutingTable
    from scorestream.runtime.pipeline import BatchScorer

    rng = random.Random(SEED + 1)
    path = tmp_path / "fuzz-tree.pmml"  # a name of its own: SparkFiles names are per session
    path.write_bytes(tree_pmml)
    jvm_session.sparkContext.addFile(str(path))
    route = Route(key="tree:1", format="pmml", file=path.name, inputs=list(feed.WINE_COLUMNS))
    table = RoutingTable(routes={"wine": route}, outputTopic="out", deadLetterTopic="dlq", served=["wine"],
                         protobuf=messages.field_table("WineRecord"))
    good = [("good", feed.wine_proto(ROWS[i], ts=i), ("out", i)) for i in range(300)]
    records = good + bad_protobuf(rng)
    rng.shuffle(records)

    ts = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
    frame = jvm_session.createDataFrame(
        [(f"k{i}".encode(), v, None, "data", 0, i, ts) for i, (_, v, _) in enumerate(records)], KAFKA_ROW)
    scorer = BatchScorer(jvm_session, sink_options={})
    rows = {r.offset: r.r for r in scorer.score(frame, 1, table).select("offset", "r").collect()}
    assert sorted(rows) == list(range(len(records))), "one result per input row"

    table_counts: dict[str, Counter] = defaultdict(Counter)
    reasons: dict[str, Counter] = defaultdict(Counter)
    problems = []
    for i, (kind, value, expect) in enumerate(records):
        r = rows[i]
        table_counts[kind]["sent"] += 1
        if r.topic == "out":
            table_counts[kind]["scored"] += 1
            label = json.loads(r.value)["label"]
            if expect[0] == "out" and label != reference[expect[1]]:
                problems.append(f"{kind} #{i}: label {label} != reference {reference[expect[1]]}")
            if expect[0] == "dlq":
                problems.append(f"{kind} #{i}: scored, expected a dead letter")
            continue
        assert r.topic == "dlq" and r.pending is None, (kind, r)
        table_counts[kind]["dead-lettered"] += 1
        h = {x.key: bytes(x.value).decode() for x in r.deadHeaders}
        reason, stage = h.get("scorestream.reason", ""), h.get("scorestream.stage", "")
        reasons[kind][f"{stage}: {_short(reason)}"] += 1
        if not reason:
            problems.append(f"{kind} #{i}: dead letter without a reason")
        if expect[0] == "out":
            problems.append(f"{kind} #{i}: dead-lettered ({stage}: {reason}), expected scored")
        elif expect[0] == "dlq" and (expect[1] and stage != expect[1] or expect[2] not in reason):
            problems.append(f"{kind} #{i}: {stage}: {reason!r}, expected {expect[1]}: {expect[2]!r}")
        if "ArrayIndexOutOfBounds" in reason or "NegativeArraySize" in reason:
            problems.append(f"{kind} #{i}: the decoder overran its input: {reason}")
    counts = scorer.counts()
    print(f"\nprotobuf records through the JVM scorer (seed {SEED + 1}), batch counts in={counts.in_} "
          f"out={counts.out} dead={counts.dead}")
    _print_table(table_counts, reasons, None, None, None, None)
    assert not problems, "\n".join(problems[:30])
    assert counts.in_ == len(records) and counts.out + counts.dead == len(records)
