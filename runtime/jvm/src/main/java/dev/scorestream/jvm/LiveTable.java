package dev.scorestream.jvm;

/**
 * The routing table of a real-time query, held on the driver (Spark's {@code trigger(realTime)}).
 *
 * <p>A real-time query has no per-batch callback in which the driver could fix the table: one
 * long task per partition runs through each batch. What every batch does have is one moment on
 * the driver when its tasks are serialized, after the batch before it has committed. A
 * {@link Scorer#live live scorer} copies this holder's table at that moment ({@link #take}), so a
 * table set here reaches whole batches only, from the next batch's first offset on. (Spark copies
 * it twice per batch, both at its start: its serializability check on the query's thread, then
 * the task binary on the DAG scheduler's; the tasks run the second.)
 *
 * <p>{@link #drain} is how a real-time query stops without writing a batch twice: from the next
 * batch on the scorer writes nothing, and once such a batch has begun ({@link #drained}) the
 * batch before it has committed; stopping the query then aborts a batch that wrote nothing, and
 * the restart reads it again.
 */
public final class LiveTable {
  private volatile String json;
  private volatile boolean draining;
  private volatile boolean drained;

  public LiveTable(String json) {
    set(json);
  }

  /** The table for batches serialized from now on; checked here, on the driver. */
  public void set(String json) {
    Scorer.Table.of(json);
    this.json = json;
  }

  /** Batches serialized from now on write nothing. */
  public void drain() {
    draining = true;
  }

  /** A batch has taken the draining table: every batch before it has committed. */
  public boolean drained() {
    return drained;
  }

  /** The table a batch's tasks carry: null while draining. */
  String take() {
    if (draining) {
      drained = true;
      return null;
    }
    return json;
  }
}
