"""delivery: exactlyOnce with trigger realTime, on real parts: a Kafka transaction per input
partition and real-time batch (TransactionalWriter). kill -9 of the job in local mode; on Spark's
standalone cluster, kill -9 of the driver, a producer from before the restart fenced, kill -9 of an
executor, a zombie executor fenced, a stateless upgrade and a rescale. A read_committed consumer
sees every input offset exactly once across the output and dead-letter topics. A file of its own:
the micro-batch tests take minutes too, and the suite's workers take a file each."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from scorestream.tools.demo import models
from harness.streaming import Stream, wait_until
from test_exactly_once import (RECORDS, ZOMBIE_CLIENT, assert_each_input_once, committed, eo_conf,
                               executors_of_latest_app, live_executors, open_transaction_of_partition_0,
                               written_again, zombie_fenced)

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


def test_kill_9_in_real_time_mode_writes_nothing_twice(serving):
    """trigger realTime: a transaction per partition and real-time batch (TransactionalWriter).
    kill -9 of the job while records flow, so a batch's transactions are open with records sent,
    then a restart: read_committed readers see every input once; the killed batch's records,
    written again by the restart, are the duplicates only a read_uncommitted reader sees."""
    # local[2]: a task slot for each of the two partitions, as real-time mode needs.
    s = serving(partitions=2, delivery="exactlyOnce", spark={"trigger": "realTime", "triggerInterval": "5s"})
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    job = s.start().wait_ready()
    stream = Stream(s, total=10**9, chunk=50, pause=0.05, broken_every=997)  # ~1,000 records/s
    stream.start()
    try:
        wait_until(lambda: committed(s) >= 3000, timeout=180, what="3,000 committed")
        time.sleep(2.5)  # into the next batch: its transactions are open, records sent in them
        job.kill()
        at_kill = committed(s)
        again = s.start().wait_ready()
        wait_until(lambda: committed(s) >= at_kill + 3000, timeout=180, what="3,000 more committed after the restart")
    finally:
        sent = stream.stop()
    rewritten = each_input_once_after(s, stream, sent, again, timeout=120)
    assert rewritten > 0, "the kill landed between transactions: nothing was sent and aborted"
    print(f"\nreal-time exactly-once kill -9: {sent} records, 0 missing, 0 duplicated for read_committed;"
          f" killed at {at_kill} committed; {rewritten} records of the killed batch written again"
          f" (seen twice by read_uncommitted readers only)")


@pytest.mark.timeout(3000)
def test_exactly_once_in_real_time_mode_on_a_standalone_cluster(serving, machines):
    """trigger realTime with executors in their own JVMs (the writer crosses to them in the task),
    a keyed stream of SCORESTREAM_EO_RECORDS records flowing throughout: kill -9 of the driver, a
    producer from before the restart fenced, kill -9 of an executor, a zombie executor fenced, a
    stateless upgrade and a rescale; a read_committed consumer sees every input offset once."""
    s = serving(partitions=2, delivery="exactlyOnce", kafka={"properties": ZOMBIE_CLIENT})
    s.publish(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    # A slot per partition: two executors of one core.
    spark = {"master": machines.master, "conf": eo_conf(2), "trigger": "realTime", "triggerInterval": "5s"}
    work = Path(machines.workdir) / "work"
    # Paced over about ten minutes (longer when the job is slower): every fault lands while records flow.
    stream = Stream(s, total=RECORDS, chunk=max(2, RECORDS // 1200), pause=0.5, broken_every=997)
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

        # 3. A zombie: an executor's machine paused while it writes, resumed once its work has moved on.
        more(3000)
        paused: set[int] = set()
        wait_until(lambda: len(live_executors(work, paused)) == 2, timeout=300, what="two live executors")
        job, refused = zombie_fenced(s, job, work, paused, restarted_if_it_exited)
        steps.append(f"executor paused while writing, its partitions written by another, resumed: refused with"
                     f" {refused} at {committed(s)}")

        # 4. An upgrade: a graceful stop, then a fresh checkpoint, starting from the group's offsets.
        more(3000)
        assert job.stop() == 0
        s.checkpoint = str(s.workdir / "stateless-upgraded")
        job = s.start(spark=spark, upgradeMode="stateless").wait_ready(timeout=300)
        more(3000)
        steps.append(f"upgraded at {committed(s)}")

        # 5. A rescale to three executors: real-time mode takes a new executor count by a restart
        # from the same checkpoint (a real-time batch's tasks are fixed while it runs).
        assert job.stop() == 0
        spark = {**spark, "conf": eo_conf(3)}
        job = s.start(spark=spark).wait_ready(timeout=300)
        more(3000)
        steps.append(f"rescaled to 3 at {committed(s)}")
        stream.hurry()  # the last fault has landed while records flowed: the rest need not be paced
        stream.join(1800)
    finally:
        sent = stream.stop()
    assert sent == RECORDS, f"the stream stopped at {sent} of {RECORDS}"
    rewritten = each_input_once_after(s, stream, sent, job, timeout=600)
    print(f"\nreal-time exactly-once on a cluster: {sent} records, 0 missing, 0 duplicated; {'; '.join(steps)};"
          f" {rewritten} records written again after aborted attempts (seen twice by read_uncommitted readers only)")
