"""delivery: exactlyOnce with trigger realTime, on real parts: a Kafka transaction per input
partition and real-time batch (TransactionalWriter). On Spark's standalone cluster, kill -9 of the
driver mid-batch (its transactions open, records sent in them), a producer from before the restart
fenced, kill -9 of an executor and a rescale by a restart. The zombie executor and the stateless
upgrade are test_exactly_once.py's: the transactional ids that fence a zombie and the offsets an
upgrade starts from are the same in both trigger modes. A read_committed consumer sees every input
offset exactly once across the output and dead-letter topics; the records of the aborted
transactions, written again, only a read_uncommitted one. A file of its own: the micro-batch tests
take minutes too, and the suite's workers take a file each."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from scorestream.tools.demo import models
from harness.streaming import Stream, wait_until
from test_exactly_once import (RECORDS, assert_each_input_once, committed, eo_conf, executors_of_latest_app,
                               open_transaction_of_partition_0, written_again)

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def each_input_once_after(s, stream, sent: int, job, timeout: float) -> int:
    """Once the stream has stopped: every record sent committed, the job stopped cleanly, each of
    the two partitions' inputs seen once by a read_committed reader. Returns the records aborted
    transactions had sent (seen twice by read_uncommitted readers only)."""
    assert stream.error is None, stream.error
    wait_until(lambda: committed(s) >= sent, timeout=timeout, what="every record committed")
    assert job.stop() == 0
    assert_each_input_once(s, sent, 2)
    return written_again(s)


@pytest.mark.timeout(3000)
def test_exactly_once_in_real_time_mode_on_a_standalone_cluster(serving, machines):
    """trigger realTime with executors in their own JVMs (the writer and the scorer's table cross to
    them in the task), a keyed stream of SCORESTREAM_EO_RECORDS records flowing throughout: a model
    swap, kill -9 of the driver, a producer from before the restart fenced, kill -9 of an executor
    and a rescale; a read_committed consumer sees every input offset once."""
    s = serving(partitions=2, delivery="exactlyOnce")
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    # A slot per partition: two executors of one core.
    spark = {"master": machines.master, "conf": eo_conf(2), "trigger": "realTime", "triggerInterval": "5s"}
    work = Path(machines.workdir) / "work"
    # Paced for as long as the faults take (every fault lands while records flow), then sent
    # unpaced up to at least RECORDS.
    stream = Stream(s, total=10**9, chunk=max(2, RECORDS // 1200), pause=0.25, broken_every=997)
    steps: list[str] = []

    def more(records: int, timeout: float = 300) -> None:
        at = committed(s)
        wait_until(lambda: committed(s) >= at + records, timeout=timeout, what=f"{records} more committed")

    def restarted_if_it_exited(job, moved_on):
        """A real-time batch needs every partition's task at once: when a task is lost, Spark
        retries it once a slot is free again, or the query fails and the driver exits, to be
        restarted (as its StatefulSet would)."""
        wait_until(lambda: moved_on() or job.proc.poll() is not None, timeout=600,
                   what="records after the executor was lost, or the driver's exit")
        if job.proc.poll() is None:
            steps.append("the query went on")
            return job
        steps.append(f"the driver exited ({job.proc.returncode}) and was restarted")
        job = s.start(spark=spark).wait_ready(timeout=300)
        wait_until(moved_on, timeout=600, what="records after the restart")
        return job

    job = s.start(spark=spark).wait_ready(timeout=300)
    stream.start()
    try:
        # 0. The job counts the slots its executors offer; it refuses a live rescale (a real-time
        # batch's tasks are fixed while it runs); a new model takes over at a batch boundary.
        code, answer = job.post("/executors", {"total": 1})
        assert (code, answer["accepted"]) == (409, False) and "restarts" in answer["reason"], (code, answer)
        more(1000)
        # Both executors serve once the master has launched the second (later on a loaded machine).
        wait_until(lambda: job.get("/stats")["totals"]["executorsUsedLastBatch"] == 2, timeout=300,
                   what="a batch on both executors")
        s.publish(models.descriptor("linear", "2", "pmml", models.linear_pmml()))
        wait_until(lambda: job.get("/stats")["dataTypes"]["wine"]["name"] == "linear"
                   and job.get("/stats")["dataTypes"]["wine"]["invocations"] >= 1000, timeout=300,
                   what="1,000 records scored by the linear model")
        steps.append(f"linear 2 took over from tree 1 at {committed(s)}")

        # 1. kill -9 of the driver mid-batch (its executors go with it).
        more(3000)
        time.sleep(2.5)
        job.kill()
        steps.append(f"driver killed at {committed(s)}")

        # A producer holding partition 0's transactional id, a transaction open: fenced by the restart.
        zombie = open_transaction_of_partition_0(s)
        job = s.start(spark=spark).wait_ready(timeout=300)
        at = committed(s, [0])
        wait_until(lambda: committed(s, [0]) > at, timeout=300, what="partition 0 written after the restart")
        with pytest.raises(KafkaException) as fenced:
            zombie.commit_transaction(30)
        steps.append(f"old producer fenced: {fenced.value.args[0].name()}")
        zombie = None

        # 2. kill -9 of an executor mid-batch.
        more(3000)
        time.sleep(2.5)
        wait_until(lambda: len(executors_of_latest_app(work)) == 2, timeout=120, what="two executors")
        os.kill(executors_of_latest_app(work)[0], signal.SIGKILL)
        steps.append(f"executor killed at {committed(s)}")
        at = committed(s)
        job = restarted_if_it_exited(job, lambda: committed(s) >= at + 3000)

        # 3. A rescale to three executors: real-time mode takes a new executor count by a restart
        # from the same checkpoint (a real-time batch's tasks are fixed while it runs).
        assert job.stop() == 0
        spark = {**spark, "conf": eo_conf(3)}
        job = s.start(spark=spark).wait_ready(timeout=300)
        more(3000)
        steps.append(f"rescaled to 3 at {committed(s)}")
        stream.hurry()  # the last fault has landed while records flowed: the rest need not be paced
        wait_until(lambda: stream.sent >= RECORDS or not stream.is_alive(), timeout=600, what=f"{RECORDS} records sent")
    finally:
        sent = stream.stop()
    assert sent >= RECORDS, f"the stream stopped at {sent} of {RECORDS}"
    rewritten = each_input_once_after(s, stream, sent, job, timeout=600)
    assert rewritten > 0, "no fault landed inside a transaction: nothing was sent and aborted"
    print(f"\nreal-time exactly-once on a cluster: {sent} records, 0 missing, 0 duplicated; {'; '.join(steps)};"
          f" {rewritten} records written again after aborted attempts (seen twice by read_uncommitted readers only)")
