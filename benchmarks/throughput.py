"""End-to-end throughput and latency, Kafka -> score -> Kafka, against baselines in the same run.

    .venv/bin/python benchmarks/throughput.py [--records 300000] [--only K,raw,...]

One embedded Apache Kafka broker; one data topic of `--records` wine records (JSON, 2 partitions)
that every peer reads; the demo's decision tree (PMML) for every PMML peer. Parts (`--only`):
  raw           confluent-kafka consume + produce, no scoring: 1 process, and 1 per partition (2)
  a             the report's processor ported to Python: confluent-kafka + pypmml, per record
                (`--baseline-records` of them: it is slow)
  K             the reference architecture: Kafka Streams 4.3.1 + PMML4S, 2 stream threads, the
                model in a global store (jvm/, built by Maven and cached on first use)
  pmml, tf      scorestream's serving job (Spark local[2]) with the tree, and with the demo's
                Keras SavedModel
  K-tf          (K-TF): the Kafka Streams peer serving tf's SavedModel with TensorFlow's Java API
                1.1.0 (one model call per record); its predictions checked against tf's on a sample
                of records (against Python TensorFlow's own output in this process when tf does not
                run), within a relative 1e-5: beyond it, the run exits 1 after its report
  rt            scorestream's serving job with the tree and `spark.trigger: realTime` (Spark's
                real-time mode, batches of `--rt-batch`, 5s by default: runtime/realtime.py)
  rt-tf         the same with tf's SavedModel (TensorFlow in the scorer's JVM scores each record
                as it comes); its predictions checked against tf's (or (K-TF)'s) as K-tf's are
  K-latency, pmml-latency, rt-latency (or: latency)
                p50/p99 from a record's CreateTime to its prediction's LogAppendTime, produced at a
                steady pace of half scorestream's PMML rate (or `--latency-rate`); scorestream with
                the job config's default trigger interval
  K-tf-latency, rt-tf-latency (or: tf-latency)
                the same for tf's SavedModel: (K-TF) beside scorestream TF in real-time mode, at half
                rt-tf's steady rate (or tf's, or `--latency-rate`)
  eo            exactly-once in the same run: scorestream PMML with `delivery: exactlyOnce` and with
                at-least-once, micro-batches and `spark.trigger: realTime`, and (K) with
                `processing.guarantee=exactly_once_v2`: throughput over the data topic, then latency
                to when a read_committed consumer receives each prediction (a transactional peer's
                records are appended before their transaction commits), (K) committing as often as
                the jobs (`commit.interval.ms`: the job config's trigger interval; realTime's batch,
                whose transaction commits at its end): micro-batches at half the at-least-once
                job's rate, realTime at half realTime exactly-once's; the ratios printed
  counting      what the serving statistics cost: the JVM scorer's counting and its drift histograms
                per record, next to its decode + PMML4S + prediction record, in one warm JVM (jvm/)
Rates from the broker's append times of each peer's output. Steady state: the records after the
first `--per-batch` (scorestream's first micro-batch, which pays for start-up and JIT; the same
count for K and rt) over their time. Warm: every peer but (raw) and (a) reads `--warm-records` more, and the
last `--records` of all they read are measured again: the steady state of a peer that has been
running for a while, which a 300,000-record run on 2 cores never reaches (HotSpot still compiles
Spark's per-batch code, its planner and task serialization, when such a run ends). Incl.
start-up: the first `--records` over the time from the peer's process start to the last of them
written. CPU per record over the steady and warm windows: every process of the peer
(the job's Python driver, its JVM and Python workers; the Kafka Streams JVM), the share of it in
the JVM's JIT compiler threads, and the microseconds of each kind of thread: JIT, records (the
threads that score them), the micro-batch driver, Kafka's client I/O threads, GC
(benchmarks/cpu.py); the broker's CPU per record over the same window is printed beside it (it
shares the cores). Nothing is asserted: the goals are printed with the figures.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import baselines
import counting
import cpu
import kstreams
import latency
import predictions
import serving
import topics as kafka
from scorestream import jars
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import EmbeddedBroker

PARTS = ("raw", "a", "K", "pmml", "tf", "K-tf", "rt", "rt-tf", "K-latency", "pmml-latency", "rt-latency",
         "K-tf-latency", "rt-tf-latency", "eo", "counting")
ALIASES = {"latency": ("K-latency", "pmml-latency", "rt-latency"), "tf-latency": ("K-tf-latency", "rt-tf-latency"),
           "all": PARTS}
DATA = "bench-in"


def parts(text: str) -> list[str]:
    chosen: list[str] = []
    for p in filter(None, (s.strip() for s in text.split(","))):
        found = ALIASES.get(p) or [q for q in PARTS if q.lower() == p.lower()]
        if not found:
            raise argparse.ArgumentTypeError(f"unknown part {p!r}: choose from {', '.join(PARTS)}, latency, all")
        chosen += [q for q in found if q not in chosen]
    return chosen


def throughput(bootstrap: str, name: str, descriptor, n: int, skip: int, make_peer, timeout: float, warm_after: int = 0,
               broker_pid: int | None = None):
    """One peer over the preloaded data topic: its rates, and its output messages. With `warm_after`,
    the peer reads that many records more, and the last `n` of them are its warm window. The
    broker's CPU over each window is sampled beside the peer's: it shares the cores."""
    t = {"data": DATA, "out": f"{name}-out", "dlq": f"{name}-dlq", "models": f"{name}-models"}
    kafka.make_topics(bootstrap, outputs=(t["out"],), **{t["dlq"]: 1, t["models"]: 1})
    feed.publish_model(bootstrap, t["models"], descriptor, to=None)
    total = n + warm_after
    peer = make_peer(t).start()

    def broker_cpu() -> float:
        return cpu.sample(broker_pid).total if broker_pid else float("nan")

    # (records written, the peer's CPU, the broker's) when each window began and ended: steady
    # [skip, n), warm [warm_after, total)
    marks = sorted({skip, n, *((warm_after,) if warm_after else ())})
    seen: dict[int, tuple] = {}

    def progress(done: int) -> None:
        for m in marks:
            if m not in seen and done >= m:
                seen[m] = (done, cpu.sample(peer.pid), broker_cpu())

    try:
        kafka.wait_written(bootstrap, [t["out"], t["dlq"]], total, timeout, peer.alive, name, progress)
        seen[total] = (total, cpu.sample(peer.pid), broker_cpu())
        seen.setdefault(n, seen[total])
    except Exception:
        print(peer.tail(), file=sys.stderr)
        raise
    finally:
        peer.stop()
    out = kafka.read_all(bootstrap, t["out"])
    # Counted on their own topic: a peer stopped once it has written `total` may have written more
    # (the data topic holds the warm window's records too), so `total - len(out)` is not them.
    rates = {**kafka.rates([m.timestamp for m in out], peer.started, skip, n),
             "dead_letters": len(kafka.read_all(bootstrap, t["dlq"]))}
    for key, (a, b) in (("cpu", (skip, n)), ("warm_cpu", (warm_after, total))):
        if a in seen and b in seen and seen[b][0] > seen[a][0]:
            rates[key] = _cpu_per_record(seen[a], seen[b])
    return rates, out


def _cpu_per_record(begin: tuple, end: tuple) -> dict:
    """Microseconds of CPU per record between two (records written, peer's CPU, broker's CPU)
    samples: the peer's, by kind, and the broker's."""
    window, per_record = end[1] - begin[1], 1e6 / (end[0] - begin[0])
    return {"us": window.total * per_record, "jit_share": window.jit / window.total if window.total else 0.0,
            "kinds": {k: v * per_record for k, v in window.by_kind().items()},
            "broker_us": (end[2] - begin[2]) * per_record}


def paced_latency(bootstrap: str, name: str, descriptor, peer, rate: float, args, visible: bool = False,
                  seconds: float | None = None, warmup: float | None = None, prewarm: tuple[float, float] = (0, 0),
                  window: float | None = None, broker_pid: int | None = None) -> dict:
    """A peer started on empty topics, then fed at a steady pace: latency.paced. The warm-up ends once
    the peer trails by less than two trigger intervals + 0.1 s of input (and latency.SETTLE after). ``visible``: to when a
    read_committed consumer receives each prediction (latency.paced). ``seconds``: measured, and
    ``warmup``: least seconds of warm-up, instead of --latency-seconds and --warmup. ``prewarm``: (seconds,
    rec/s) the peer serves first, unmeasured (latency.prewarm). ``window``: latency.paced's. ``broker_pid``:
    the broker's own time for produce requests is read as the measured window ends (latency.broker_request_times)."""
    t = {"data": f"{name}-data", "out": f"{name}-out", "dlq": f"{name}-dlq", "models": f"{name}-models"}
    kafka.make_topics(bootstrap, t["data"], (t["out"],), stamped_data=True, **{t["dlq"]: 1, t["models"]: 1})
    feed.publish_model(bootstrap, t["models"], descriptor, to=None)
    p = peer(t).start()
    try:
        p.wait_ready()
        slack = 2 * p.trigger_seconds + 0.1
        already = latency.prewarm(bootstrap, t["data"], t["out"], prewarm[1], prewarm[0], p.alive) if prewarm[0] else 0
        v = latency.paced(bootstrap, t["data"], t["out"], rate, warmup or args.warmup, seconds or args.latency_seconds,
                          slack, p.alive, visible=visible, already=already, window=window)
        if broker_pid:
            v["broker"] = latency.broker_request_times(broker_pid)
        return {**v, "prewarm": prewarm}
    except Exception:
        print(p.tail(), file=sys.stderr)
        raise
    finally:
        p.stop()


def run(args) -> dict:
    r: dict = {}
    rows = feed.wine_rows()
    tree = models.descriptor("tree", "1", "pmml", models.tree_pmml(rows))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        b, work = broker.bootstrap, Path(tmp)

        def part(name: str, fn):
            if name not in args.only:
                return
            print(f"[{time.strftime('%H:%M:%S')}] {name} ... (load {os.getloadavg()[0]:.2f})", flush=True)
            try:
                r[name] = fn()
            except Exception as e:  # one broken peer must not hide the others' figures
                traceback.print_exc()
                r[name] = e

        if any(p in args.only for p in ("raw", "a", "K", "pmml", "tf", "K-tf", "rt", "rt-tf", "eo")):
            kafka.make_topics(b, DATA)
            kafka.preload(b, DATA, args.records + args.warm_records)
        part("raw", lambda: (baselines.raw_rate(b, DATA, args.records, 1), baselines.raw_rate(b, DATA, args.records, 2)))
        part("a", lambda: baselines.per_record_rate(b, DATA, tree.data, args.baseline_records))

        def k_peer(t):
            return kstreams.PeerProcess(b, f"bench-{t['out']}", t, work / t["out"])

        def k_throughput():
            rates, out = throughput(b, "k", tree, args.records, args.per_batch, k_peer, 600, args.warm_records, broker.pid)
            return {**rates, "agreement": baselines.pypmml_agreement(tree.data, out)}

        def job_run(name, descriptor, warm_after=0, realtime=False):
            # A real-time query takes no maxOffsetsPerTrigger: its batches are checkpoint intervals.
            per_batch = None if realtime else args.per_batch
            return throughput(b, name, descriptor, args.records, args.per_batch,
                              lambda t: serving.Job(b, name, t, work, per_batch=per_batch, trigger="100ms",
                                                    realtime=realtime, rt_batch=args.rt_batch), 900,
                              warm_after, broker.pid)

        def job_throughput(name, descriptor, warm_after=0, realtime=False):
            rates, out = job_run(name, descriptor, warm_after, realtime)
            return {**rates, "agreement": baselines.pypmml_agreement(tree.data, out)}

        @functools.cache
        def keras():
            """The demo's Keras classifier as a SavedModel, made once: tf and K-tf serve the same bytes."""
            return models.descriptor("keras", "1", "tensorflow", models.keras_savedmodel_zip(rows, epochs=3))

        tf_sample: dict = {}  # some of tf's predictions, by key: what (K-TF)'s are checked against

        def tf_throughput():
            rates, out = job_run("tf", keras(), args.warm_records)
            tf_sample.update(predictions.sample(out))
            return rates

        def k_tf_peer(t):
            return kstreams.PeerProcess(b, f"bench-{t['out']}", t, work / t["out"], model_format="tensorflow")

        def k_tf_throughput():
            rates, out = throughput(b, "k-tf", keras(), args.records, args.per_batch, k_tf_peer, 900, args.warm_records,
                                    broker.pid)
            return {**rates, "difference": tf_difference(out)}

        def rt_tf_throughput():
            rates, out = job_run("rt-tf", keras(), args.warm_records, realtime=True)
            return {**rates, "difference": tf_difference(out)}

        def tf_difference(out) -> predictions.Difference:
            if tf_sample:
                return predictions.compare(tf_sample, predictions.matching(out, tf_sample), "scorestream TF's")
            found = predictions.sample(out)
            return predictions.compare(predictions.tf_model_predictions(keras().data, found), found,
                                       "Python TensorFlow's own output in this process")

        part("K", k_throughput)
        part("pmml", lambda: job_throughput("pmml", tree, args.warm_records))
        part("tf", tf_throughput)
        part("K-tf", k_tf_throughput)
        part("rt", lambda: job_throughput("rt", tree, args.warm_records, realtime=True))
        part("rt-tf", rt_tf_throughput)

        rate, basis = latency_rate(args, r)
        r["latency_rate"] = (rate, basis)
        seconds = r["latency_seconds"] = latency_seconds(args)
        # Percentiles by real-time batch too: one batch end in each, and (K)'s over the same slices.
        window = serving.duration_seconds(args.rt_batch) if "rt-latency" in args.only else None
        part("K-latency", lambda: paced_latency(b, "lat-k", tree, k_peer, rate, args, seconds=seconds, window=window,
                                                broker_pid=broker.pid))
        # The job configuration's own trigger interval: none is set here.
        part("pmml-latency", lambda: paced_latency(b, "lat-pmml", tree, lambda t: serving.Job(b, "lat-pmml", t, work), rate,
                                                  args, seconds=seconds))
        # The first batch ends reach a cold planner (the next batch is planned as the last ends):
        # two of them and 5 s more go by in the warm-up, as they do at 5 s batches anyway.
        rt_warmup = max(args.warmup, 2 * serving.duration_seconds(args.rt_batch) + 5)
        part("rt-latency", lambda: paced_latency(b, "lat-rt", tree, lambda t: serving.Job(b, "lat-rt", t, work, realtime=True,
                                                                                           rt_batch=args.rt_batch),
                                                rate, args, seconds=seconds, warmup=rt_warmup,
                                                prewarm=(60 * args.rt_warm_minutes, args.rt_warm_rate), window=window,
                                                broker_pid=broker.pid))
        tf_rate, tf_basis = tf_latency_rate(args, r)
        r["tf_latency_rate"] = (tf_rate, tf_basis)
        tf_window = serving.duration_seconds(args.rt_batch) if "rt-tf-latency" in args.only else None
        part("K-tf-latency", lambda: paced_latency(b, "lat-k-tf", keras(), k_tf_peer, tf_rate, args, seconds=seconds,
                                                   window=tf_window, broker_pid=broker.pid))
        part("rt-tf-latency", lambda: paced_latency(b, "lat-rt-tf", keras(),
                                                    lambda t: serving.Job(b, "lat-rt-tf", t, work, realtime=True,
                                                                          rt_batch=args.rt_batch),
                                                    tf_rate, args, seconds=seconds, warmup=rt_warmup,
                                                    prewarm=(60 * args.rt_warm_minutes, args.rt_warm_rate),
                                                    window=tf_window, broker_pid=broker.pid))
        def eo():
            """(K) exactly_once_v2, scorestream exactly-once and at-least-once, micro-batches and
            realTime: throughput, then latency to a read_committed reader, (K) committing as often
            as the jobs do (the job config's trigger interval; realTime's batch)."""
            def k_eos(t, commit_s: float | None = None):
                settings = {"processing.guarantee": "exactly_once_v2"}
                if commit_s:
                    settings["commit.interval.ms"] = str(round(commit_s * 1000))
                peer = kstreams.PeerProcess(b, f"bench-{t['out']}", t, work / t["out"], **settings)
                # Its output becomes visible once per commit (exactly_once_v2's default: 100 ms).
                peer.trigger_seconds = commit_s or 0.1
                return peer

            def job(delivery, realtime=False, trigger="100ms", per_batch=args.per_batch):
                # A real-time query takes no maxOffsetsPerTrigger: its batches are checkpoint intervals.
                return lambda t: serving.Job(b, t["out"].removesuffix("-out"), t, work,
                                             per_batch=None if realtime else per_batch,
                                             trigger=trigger, delivery=delivery, realtime=realtime,
                                             rt_batch=args.rt_batch)

            found: dict = {}
            for name, peer in {"K-eos": k_eos, "alo": job("atLeastOnce"), "eo": job("exactlyOnce"),
                               "rt-alo": job("atLeastOnce", True), "rt-eo": job("exactlyOnce", True)}.items():
                try:  # one broken peer must not hide the others' figures
                    found[name] = throughput(b, f"eo-{name.lower()}", tree, args.records, args.per_batch, peer, 900,
                                             broker_pid=broker.pid)[0]
                except Exception as e:
                    traceback.print_exc()
                    found[name] = e
            # At half the at-least-once job's rate, and in real-time mode at half realTime exactly-once's.
            found["rate"] = args.latency_rate or found["alo"]["steady"] / 2
            rt_max = next((found[k]["steady"] for k in ("rt-eo", "rt-alo") if isinstance(found[k], dict)), None)
            found["rt_rate"] = args.latency_rate or (rt_max / 2 if rt_max else found["rate"])
            found["commit_s"] = serving.duration_seconds(serving.default_trigger())
            found["rt_commit_s"] = serving.duration_seconds(args.rt_batch)
            # Latency peers run the job config's own trigger interval, as pmml-latency does.
            latency_peers = {
                "K-eos": (found["rate"], lambda t: k_eos(t, found["commit_s"])),
                "alo": (found["rate"], job("atLeastOnce", trigger=None, per_batch=None)),
                "eo": (found["rate"], job("exactlyOnce", trigger=None, per_batch=None)),
                "rt-K-eos": (found["rt_rate"], lambda t: k_eos(t, found["rt_commit_s"])),
                "rt-alo": (found["rt_rate"], job("atLeastOnce", True, per_batch=None)),
                "rt-eo": (found["rt_rate"], job("exactlyOnce", True, per_batch=None)),
            }
            for name, (rate, peer) in latency_peers.items():
                try:  # a peer that cannot keep up at the rate keeps its throughput figures
                    found[f"{name}-latency"] = paced_latency(b, f"eo-lat-{name.lower()}", tree, peer, rate, args,
                                                             visible=True)
                except Exception as e:
                    traceback.print_exc()
                    found[f"{name}-latency"] = e
            return found

        part("eo", eo)
    part("counting", counting.measure)
    return r


def latency_seconds(args) -> float:
    """--latency-seconds, up to whole real-time batches when rt-latency or rt-tf-latency runs: each
    batch's end stalls the reading, so a window of a fraction of a batch would hold a stall or none
    by chance. Every latency part measures as long, so the peers' windows match."""
    if "rt-latency" not in args.only and "rt-tf-latency" not in args.only:
        return args.latency_seconds
    batch = serving.duration_seconds(args.rt_batch)
    return math.ceil(args.latency_seconds / batch - 1e-9) * batch


def latency_rate(args, r: dict) -> tuple[float, str]:
    return half_rate(args, r, (("pmml", "half of scorestream PMML's steady rate"),
                               ("K", "half of (K)'s steady rate: scorestream PMML was not measured")), "PMML")


def tf_latency_rate(args, r: dict) -> tuple[float, str]:
    """Half the TensorFlow job's maximum: its real-time rate where measured, else its micro-batch one."""
    return half_rate(args, r, (("rt-tf", "half of scorestream TF realTime's steady rate"),
                               ("tf", "half of scorestream TF's steady rate: its realTime rate was not measured"),
                               ("K-tf", "half of (K-TF)'s steady rate: scorestream TF was not measured")), "TensorFlow")


def half_rate(args, r: dict, parts: tuple[tuple[str, str], ...], kind: str) -> tuple[float, str]:
    """--latency-rate, else half the steady rate of the first of `parts` measured, with what it is."""
    if args.latency_rate:
        return args.latency_rate, "--latency-rate"
    for name, label in parts:
        if isinstance(r.get(name), dict) and math.isfinite(r[name]["steady"]):
            return r[name]["steady"] / 2, label
    return 5000.0, f"a default: no {kind} rate was measured in this run"


def report(args, r: dict) -> None:
    ok = {k: v for k, v in r.items() if not isinstance(v, Exception)}
    failed = {k: str(v).splitlines()[0][:100] for k, v in r.items() if isinstance(v, Exception)}
    print(f"\n{args.records:,} JSON wine records, 2 partitions, Apache Kafka {jars.KAFKA} (embedded, one broker), "
          f"{os.cpu_count()} cores shared by everything; load average at start {r['load']:.1f}")
    if r["load"] > 1.0:
        print("  (other work was running: every figure is lower, and the ratios noisier, than on an idle machine)")
    raw1, raw2 = ok.get("raw", (None, None))
    per_record, k, pmml, tf, rt = ok.get("a"), ok.get("K"), ok.get("pmml"), ok.get("tf"), ok.get("rt")
    k_tf, rt_tf = ok.get("K-tf"), ok.get("rt-tf")
    rows = [
        ("(raw) confluent-kafka consume+produce, 1 proc", "raw", raw1 and {"steady": raw1}),
        ("(raw) confluent-kafka consume+produce, 2 procs", "raw", raw2 and {"steady": raw2}),
        (f"(a) per-record pypmml loop ({args.baseline_records:,} records)", "a", per_record and {"steady": per_record}),
        ("(K) Kafka Streams + PMML4S, 2 threads", "K", k),
        ("scorestream PMML", "pmml", pmml),
        ("scorestream TensorFlow", "tf", tf),
        ("(K-TF) Kafka Streams + TF Java, 2 threads", "K-tf", k_tf),
        (f"scorestream PMML, trigger realTime {args.rt_batch}", "rt", rt),
        (f"scorestream TF, trigger realTime {args.rt_batch}", "rt-tf", rt_tf),
    ]
    if any(key in r for _, key, _ in rows):
        print(f"{'records/s':>62}{'incl. start-up':>16}")
    for label, key, v in rows:
        if key in failed:
            print(f"{label:48}failed: {failed[key]}")
        elif v:
            print(f"{label:48}{v['steady']:>14,.0f}{_startup(v):>16}{_notes(v)}")
            if "warm" in v:
                print(f"{'  warm: after ' + format(v['warm_after'], ',') + ' records':48}{v['warm']:>14,.0f}{'':16}   "
                      + _cpu_note("warm", v.get("warm_cpu")))

    goals = []
    for name, job in (("scorestream PMML", pmml), ("scorestream PMML realTime", rt)):
        for rate, label in (("steady", ""), ("warm", "  warm")):
            if job and raw1 and rate in job:
                goals.append((label or f"{name} >= 50% of (raw, 1 proc)", f"{job[rate] / raw1:.0%}",
                              job[rate] >= 0.5 * raw1, ""))
        goals += _against_peer(name, job, "(K)", k)
    goals += _against_peer("scorestream TF", tf, "(K-TF)", k_tf)
    if tf and pmml:
        goals.append(("scorestream TF >= 80% of scorestream PMML", f"{tf['steady'] / pmml['steady']:.0%}", tf["steady"] >= 0.8 * pmml["steady"], ""))
    goals += _against_peer("scorestream TF realTime", rt_tf, "(K-TF)", k_tf, at_least=1.2)
    warming = [(label, v["slices"]) for label, key, v in rows if v and v.get("slices")]
    if warming:
        print(f"\nrecords/s of each {args.per_batch:,} records written in turn (the first from the first one written; "
              f"steady = all but the first):")
        for label, slices in warming:
            print(f"  {label:46}" + "".join(f"{x:>9,.0f}" for x in slices))

    lat = ok.get("pmml-latency")
    if lat:
        limit = 2 * serving.duration_seconds(serving.default_trigger()) * 1000 + 100
        goals.append(("scorestream p99 latency <= 2 x trigger + 100 ms", f"{lat['p99']:,} ms", lat["p99"] <= limit, f" (limit {limit:,.0f} ms)"))
    if goals:
        warm = f"; warm: the last {args.records:,} of {args.records + args.warm_records:,}" if args.warm_records else ""
        print(f"\ngoals (throughput: steady state{warm}):")
        for text, value, met, extra in goals:
            print(f"  {text:48}{value:>9}   {'met' if met else 'NOT met'}{extra}")
    if rt and pmml:
        print("  realTime against processingTime: " + ", ".join(
            f"{rate} {rt[rate] / pmml[rate]:.2f}x" for rate in ("steady", "warm") if rate in rt and rate in pmml))
    if per_record and (pmml or tf or k):
        print("  against (a): " + ", ".join(f"{label} x{v['steady'] / per_record:,.0f}"
                                            for label, v in (("scorestream PMML", pmml), ("TF", tf), ("(K)", k)) if v))
    for label, v in (("(K-TF)", k_tf), ("scorestream TF realTime", rt_tf)):
        if v and "difference" in v:
            print(f"\n{label} predictions: {v['difference'].describe()}")
            if not v["difference"].within_tolerance:
                print(f"  BEYOND TOLERANCE: {label} does not serve the other TensorFlow peer's predictions; its"
                      " figures compare different work")

    if any(key in r for key in ("K-latency", "pmml-latency", "rt-latency")):
        rate, basis = r["latency_rate"]
        print(f"\nlatency, record CreateTime -> prediction LogAppendTime, at {rate:,.0f} rec/s ({basis}), "
              f"{r['latency_seconds']:.0f}s after a warm-up; per record, by stage (wall clock of one host, 1 ms "
              f"resolution; the stages add up to the whole):")
        _latency_rows(ok, failed, (("K-latency", "(K)"),
                                   ("pmml-latency", f"scorestream PMML, trigger {serving.default_trigger()}"),
                                   ("rt-latency", f"scorestream PMML, trigger realTime {args.rt_batch}")))

    report_tf_latency(args, r, ok, failed)

    if "eo" in ok:
        report_eo(ok["eo"])
    elif "eo" in failed:
        print(f"\nexactly-once: failed: {failed['eo']}")

    if "counting" in ok:
        work, count, drift = ok["counting"]
        print(f"\nserving statistics, counted by the JVM scorer (BatchCounts): {count:.1f} ns per record, next to "
              f"{work:,.0f} ns of decode + PMML4S + prediction record: {count / (work + count):.2%} of the scorer's work")
        print(f"drift histograms (DriftCounts: each model input and the prediction binned): {drift:.1f} ns per "
              f"record, {drift / (work + count + drift):.2%} of the scorer's work")


def _latency_rows(ok: dict, failed: dict, parts: tuple[tuple[str, str], ...]) -> None:
    for key, label in parts:
        if key in failed:
            print(f"  {label:40}failed: {failed[key]}")
        elif key in ok:
            first, *rest = latency.describe(ok[key])
            print(f"  {label:40}{first}")
            for line in rest:
                print(f"    {line}")


def report_tf_latency(args, r: dict, ok: dict, failed: dict) -> None:
    """TensorFlow's latency parts: (K-TF) beside scorestream TF realTime, and the p99 goal."""
    if not any(key in r for key in ("K-tf-latency", "rt-tf-latency")):
        return
    rate, basis = r["tf_latency_rate"]
    print(f"\nlatency of the TensorFlow peers, the same measure, at {rate:,.0f} rec/s ({basis}):")
    _latency_rows(ok, failed, (("K-tf-latency", "(K-TF)"),
                               ("rt-tf-latency", f"scorestream TF, trigger realTime {args.rt_batch}")))
    if "rt-tf-latency" in ok:
        p99 = ok["rt-tf-latency"]["p99"]
        print(f"  scorestream TF realTime p99 <= {TF_REAL_TIME_P99_MS} ms{p99:>9,} ms   "
              f"{'met' if p99 <= TF_REAL_TIME_P99_MS else 'NOT met'}")


# issue 49's goal for TensorFlow in real-time mode at half its maximum rate
TF_REAL_TIME_P99_MS = 50


def _against_peer(name: str, job: dict | None, label: str, peer: dict | None, at_least: float = 1.0) -> list[tuple]:
    """The goals of a scorestream job against its Kafka Streams peer: at least `at_least` x its rate, steady and warm."""
    goals = []
    for rate, indent in (("steady", ""), ("warm", "  warm")):
        if job and peer and rate in job and rate in peer:
            x = job[rate] / peer[rate]
            wins = "" if x >= 1 else f" - {label} wins by {peer[rate] / job[rate]:.2f}x ({peer[rate]:,.0f} vs {job[rate]:,.0f} rec/s)"
            if x < 1 and rate == "steady":
                wins += f"; incl. start-up by {peer['with_startup'] / job['with_startup']:.2f}x"
            goals.append((indent or f"{name} >= {at_least:.1f}x {label}", f"{x:.2f}x", x >= at_least, wins))
    return goals


def predictions_differ(r: dict) -> bool:
    """A TensorFlow peer's predictions were compared and are not the other's."""
    return any(isinstance(r.get(key), dict) and not r[key]["difference"].within_tolerance for key in ("K-tf", "rt-tf"))


def report_eo(e: dict) -> None:
    labels = {"K-eos": "(K) Kafka Streams, exactly_once_v2", "alo": "scorestream PMML, atLeastOnce",
              "eo": "scorestream PMML, exactlyOnce", "rt-alo": "scorestream PMML realTime, atLeastOnce",
              "rt-eo": "scorestream PMML realTime, exactlyOnce"}
    print("\nexactly-once, the same run (records/s from the broker's append times; micro-batches at trigger 100 ms,"
          " (K) committing every 100 ms):")
    for key, label in labels.items():
        v = e[key]
        text = f"failed: {str(v).splitlines()[0][:90]}" if isinstance(v, Exception) else f"{v['steady']:>10,.0f} rec/s"
        print(f"  {label:40}{text}{'' if isinstance(v, Exception) else _notes(v)}")
    steady = {key: e[key]["steady"] for key in labels if isinstance(e[key], dict)}
    short = {"K-eos": "(K)", "alo": "atLeastOnce", "eo": "exactlyOnce", "rt-alo": "realTime atLeastOnce",
             "rt-eo": "realTime exactlyOnce"}
    ratios = [f"{short[a]} / {short[b]} {steady[a] / steady[b]:.2f}x"
              for a, b in (("eo", "alo"), ("eo", "K-eos"), ("rt-eo", "rt-alo")) if a in steady and b in steady]
    print("  throughput: " + "; ".join(ratios))
    for prefix, rate, commit in (("", e["rate"], e["commit_s"]), ("rt-", e["rt_rate"], e["rt_commit_s"])):
        interval = "realTime batches" if prefix else "the jobs' trigger"
        print(f"  latency from CreateTime to a read_committed consumer's receipt at {rate:,.0f} rec/s;"
              f" {interval} and (K)'s commit.interval.ms {commit:g} s:")
        keys = [f"{prefix}K-eos", f"{prefix}alo", f"{prefix}eo"]
        lat = {k: e[f"{k}-latency"] for k in keys}
        for k in keys:
            v = lat[k]
            text = (f"failed: {str(v).splitlines()[0][:90]}" if isinstance(v, Exception) else
                    f"p50 {v['p50']:>6,} ms   p99 {v['p99']:>6,} ms   max {v['max']:>6,} ms")
            print(f"    {labels[k.replace('rt-K-eos', 'K-eos')]:40}{text}")
        eo, k = lat[f"{prefix}eo"], lat[f"{prefix}K-eos"]
        if isinstance(eo, dict) and isinstance(k, dict):
            print(f"    p99 exactlyOnce / (K) exactly_once_v2 at the same commit interval {eo['p99'] / max(k['p99'], 1):.2f}x")


def _startup(v: dict) -> str:
    return f"{v['with_startup']:,.0f}" if "with_startup" in v else ""


def _notes(v: dict) -> str:
    if "first_written_s" not in v:
        return ""
    notes = [f"output from {v['first_written_s']:.1f}s to {v['last_written_s']:.1f}s after start"]
    if "cpu" in v:
        notes.append(_cpu_note("steady", v["cpu"]))
    if v.get("dead_letters"):
        notes.append(f"{v['dead_letters']:,} dead letters")
    if v.get("agreement"):
        notes.append("predictions = pypmml's: {}/{}".format(*v["agreement"]))
    return "   " + "; ".join(notes)


def _cpu_note(window: str, c: dict | None) -> str:
    if not c:
        return ""
    kinds = sorted(c["kinds"].items(), key=lambda kv: -kv[1])
    return (f"{window}: {c['us']:.1f} us CPU per record, {c['jit_share']:.0%} of it JIT compiling "
            f"({', '.join(f'{k} {us:.1f}' for k, us in kinds if us >= 0.05)}); the broker {c['broker_us']:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000, help="records every peer reads, and each window measures (default 300,000)")
    ap.add_argument("--baseline-records", type=int, default=5_000, help="records for (a) (default 5,000)")
    ap.add_argument("--per-batch", type=int, default=50_000,
                    help="scorestream's maxOffsetsPerTrigger, and the records left out of the steady rate")
    ap.add_argument("--warm-records", type=int, default=600_000,
                    help="records every peer but (raw) and (a) reads before its warm window: the same count as "
                         "--records, read again once the JIT has had time (default 600,000; 0: no warm window)")
    ap.add_argument("--only", type=parts, default=list(PARTS), help=f"comma-separated: {','.join(PARTS)}; or {', '.join(ALIASES)}")
    ap.add_argument("--latency-rate", type=float, help="records/s for the latency runs (default: half scorestream's PMML rate; "
                         "for the TensorFlow peers, half TF realTime's)")
    ap.add_argument("--latency-seconds", type=float, default=25.0, help="measured seconds at the paced rate (default 25)")
    ap.add_argument("--warmup", type=float, default=10.0, help="least seconds of warm-up before measuring latency")
    ap.add_argument("--rt-batch", default=serving.REAL_TIME_BATCH,
                    help=f"the realTime job's triggerInterval in rt and rt-latency (default {serving.REAL_TIME_BATCH}, Spark's "
                         f"shortest); rt-latency then measures whole batches (--latency-seconds rounded up)")
    ap.add_argument("--rt-warm-minutes", type=float, default=0,
                    help="rt-latency: minutes the job serves --rt-warm-rate first, unmeasured: a job that has run "
                         "for a while, whose JIT has compiled what runs once a batch (default 0)")
    ap.add_argument("--rt-warm-rate", type=float, default=5000, help="records/s of --rt-warm-minutes (default 5,000)")
    args = ap.parse_args()
    args.per_batch = min(args.per_batch, max(1, args.records // 6))
    if 0 < args.warm_records < args.records:
        ap.error("--warm-records: at least --records, or 0")
    load = os.getloadavg()[0]  # over the last minute: other work running as this starts
    print(f"[{time.strftime('%H:%M:%S')}] load average at start {load:.2f} ({os.cpu_count()} cores)", flush=True)
    r = run(args)
    r["load"] = load
    report(args, r)
    if predictions_differ(r):
        sys.exit(1)


if __name__ == "__main__":
    main()
