"""``scorestream demo``: the whole data plane on one machine, with nothing to prepare.

Starts Apache Kafka (one local broker), trains three models on the packaged wine data, runs the
serving job as its own process (the same entry point a pod runs), streams wine records, swaps the model twice
mid-stream (PMML tree -> PMML linear regression -> TensorFlow), injects malformed records, prints
live progress, and prints the serving statistics at the end. Everything it starts, it stops.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

from scorestream.config import JobConfig
from scorestream.tools.demo import feed, models
from scorestream.tools.local.broker import EmbeddedBroker, create_topics, free_port
from scorestream.tools.local.process import JobProcess
from scorestream.tools.local.rss import ProcessTreeMemory

DEMO = ("demo", "wine")  # the demo job's namespace and name: its models are addressed to it
TOPICS = {"data": "wine-records", "out": "wine-predictions", "dlq": "wine-records-dlq", "models": "scorestream-models"}
MALFORMED = [b'{"dataType": "wine", "alcohol": ', b'{"dataType": "wine", "alcohol": "lots"}', b"not json at all"]


def _say(msg: str) -> None:
    print(msg, flush=True)


class Producer(threading.Thread):
    """Streams wine records at a steady rate; a malformed record now and then. It pauses once it
    has sent each of ``pauses`` records, until the demo sets ``flowing`` again."""

    def __init__(self, bootstrap: str, total: int, rate: int, pauses: tuple[int, ...]):
        super().__init__(daemon=True, name="demo-producer")
        self.bootstrap, self.total, self.rate, self.pauses = bootstrap, total, rate, pauses
        self.sent = 0
        self.malformed = 0
        self.error: Exception | None = None
        self.flowing = threading.Event()
        self.flowing.set()

    def run(self) -> None:
        rows = feed.wine_rows()
        chunk = max(1, self.rate // 10)
        started = time.monotonic()
        try:
            while self.sent < self.total:
                if not self.flowing.is_set():
                    paused = time.monotonic()
                    self.flowing.wait()
                    started += time.monotonic() - paused  # keep the rate, do not catch up
                n = min(chunk, self.total - self.sent)
                records = feed.wine_records([rows[(self.sent + i) % len(rows)] for i in range(n)], start=self.sent)
                if self.sent and self.sent % (self.total // 4) < chunk and self.malformed < len(MALFORMED):
                    records.append((b"malformed", MALFORMED[self.malformed]))
                    self.malformed += 1
                feed.produce(self.bootstrap, TOPICS["data"], records, partitions=2)
                pause = any(self.sent < p <= self.sent + n for p in self.pauses)
                self.sent += n
                if pause:
                    self.flowing.clear()
                ahead = self.sent / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        except Exception as e:  # reported by the demo
            self.error = e


def run_demo(records: int = 30000, rate: int = 3000, workdir: str | None = None) -> int:
    own = workdir is None
    work = Path(workdir or tempfile.mkdtemp(prefix="scorestream-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    job: JobProcess | None = None
    try:
        _say("scorestream demo: training the demo's models on the wine-quality data (UCI, CC BY 4.0)")
        rows = feed.wine_rows()
        plan = [
            models.descriptor("wine-tree", "1", "pmml", models.tree_pmml(rows), description="decision tree (scikit-learn -> PMML)"),
            models.descriptor("wine-linear", "2", "pmml", models.linear_pmml(rows), description="linear regression (scikit-learn -> PMML)"),
            models.descriptor("wine-keras", "3", "tensorflow", models.keras_savedmodel_zip(rows), description="small neural network (Keras -> SavedModel)"),
        ]
        with EmbeddedBroker(log=work / "broker.log") as broker:
            _say(f"broker: Apache Kafka on {broker.bootstrap} (KRaft, a temporary log directory)")
            create_topics(
                broker.bootstrap,
                {TOPICS["data"]: 2, TOPICS["out"]: 2, TOPICS["dlq"]: 1, TOPICS["models"]: 1},
                {TOPICS["models"]: {"cleanup.policy": "compact"}},
            )
            feed.publish_model(broker.bootstrap, TOPICS["models"], plan[0], to=DEMO)
            config = JobConfig.model_validate(
                {
                    "name": DEMO[1],
                    "namespace": DEMO[0],
                    "dataTypes": ["wine"],
                    "kafka": {
                        "bootstrapServers": broker.bootstrap,
                        "dataTopic": TOPICS["data"],
                        "outputTopic": TOPICS["out"],
                        "deadLetterTopic": TOPICS["dlq"],
                        "modelsTopic": TOPICS["models"],
                        # A couple of seconds of input per batch at most, so swaps land mid-stream.
                        "maxOffsetsPerTrigger": max(1000, 2 * rate),
                    },
                    "input": {"fields": list(feed.WINE_COLUMNS)},
                    "spark": {"master": "local[2]", "triggerInterval": "1s"},
                    "http": {"host": "127.0.0.1", "port": free_port()},
                    "checkpointLocation": str(work / "checkpoint"),
                    "workDir": str(work / "job"),
                }
            )
            job = JobProcess(config, work).start()
            _say(f"serving job: pid {job.proc.pid}, status on {job.url}/stats (log: {job.log_path})")
            memory = ProcessTreeMemory(job.proc.pid).start()
            job.wait_ready()
            # Pauses: after a first batch's worth (it starts Spark's tasks: seconds, rather than
            # pile the stream up behind it), and at 1/4 and 1/2 of the records, where the models
            # switch once the job has taken in all before: each model scores its share, however
            # busy the machine.
            producer = Producer(broker.bootstrap, records, rate, pauses=(300, records // 4, records // 2))
            producer.start()
            _say(f"streaming {records} records at {rate}/s; models switch after 1/4 and 1/2 of it is scored\n")
            _progress(job, producer, plan, broker.bootstrap, records)
            stats = job.get("/stats")
            code = job.stop()
            memory.stop()
            _summary(stats, producer, memory, code)
            return 0 if code == 0 and producer.error is None else 1
    finally:
        if job is not None:
            job.kill()
        if own:
            shutil.rmtree(work, ignore_errors=True)


def _progress(job: JobProcess, producer: Producer, plan, bootstrap: str, total: int) -> None:
    published = 1
    last_in, last_t = 0, time.monotonic()
    # A stall, not a slow machine, fails the demo: swaps pause the stream, and the first TensorFlow
    # model loads TensorFlow's native libraries in the JVM (seconds on 2 busy cores).
    stall, moved = 120.0, time.monotonic()
    while True:
        time.sleep(1.0)
        stats = job.get("/stats")
        t = stats["totals"]
        now = time.monotonic()
        rate = (t["recordsIn"] - last_in) / (now - last_t)
        if t["recordsIn"] > last_in:
            moved = now
        elif now - moved > stall:
            raise TimeoutError(f"the job took in no record for {stall:.0f}s ({t['recordsIn']} of {total} so far)")
        last_in, last_t = t["recordsIn"], now
        serving = next(iter(stats["dataTypes"].values()), {})
        _say(
            f"  in {t['recordsIn']:>7}  out {t['recordsOut']:>7}  dead-lettered {t['recordsDeadLettered']:>3}  "
            f"{rate:>8.0f} rec/s  lag {t['lag'] if t['lag'] is not None else '-':>6}  "
            f"model {serving.get('name')}:{serving.get('version')}  switches {t['modelSwitches']}"
        )
        # The stream has paused and the job has taken in all it sent. At 1/4 and 1/2 the model
        # switches, and the stream waits until the job serves it, so every model scores its share
        # of this short demo even though loading TensorFlow takes seconds; a real stream keeps
        # flowing, scored by the old model until the new one is ready.
        if not producer.flowing.is_set() and t["recordsIn"] >= producer.sent + producer.malformed:
            if published < len(plan) and producer.sent >= published * total // 4:
                model = plan[published]
                feed.publish_model(bootstrap, TOPICS["models"], model, to=DEMO)
                _say(f"  >> published {model.label} ({model.format}) to {TOPICS['models']}; the stream waits for the swap")
                _wait_serving(job, model, timeout=120)
                published += 1
            else:
                _say("  >> warm: the first batch is scored; streaming on")
            producer.flowing.set()
            moved = time.monotonic()
        if producer.error is not None:
            raise producer.error
        if not producer.is_alive() and t["recordsIn"] >= producer.sent + producer.malformed:
            return


def _wait_serving(job: JobProcess, model, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        serving = job.get("/models")["serving"].get(model.data_type, {})
        if (serving.get("name"), serving.get("version")) == (model.name, model.version):
            _say(f"  >> the job serves {model.label}")
            return
        time.sleep(0.2)
    raise TimeoutError(f"the job did not serve {model.label} within {timeout:.0f}s")


def _summary(stats: dict, producer: Producer, memory: "ProcessTreeMemory", code: int) -> None:
    t = stats["totals"]
    _say(f"\nserving statistics (GET /stats), job exit code {code}:")
    for dt, info in stats["dataTypes"].items():
        for m in info["previous"] + [info]:
            d = m["duration"]
            _say(
                f"  {dt}: {m['name']}:{m['version']:<3} since {time.strftime('%H:%M:%S', time.localtime(m['since']))}  "
                f"invocations {m['invocations']:>6}  mean {d['meanMs'] or 0:.4f} ms  "
                f"min {d['minMs'] or 0:.4f} ms  max {d['maxMs'] or 0:.4f} ms  ({m['description']})"
            )
    _say(
        f"  records in {t['recordsIn']}, out {t['recordsOut']}, dead-lettered {t['recordsDeadLettered']} "
        f"(malformed injected: {producer.malformed}), model switches {t['modelSwitches']}, batches {t['batches']}"
    )
    _say("memory (peak RSS): " + json.dumps(memory.peaks_mb()))
