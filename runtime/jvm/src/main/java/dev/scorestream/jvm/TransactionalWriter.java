package dev.scorestream.jvm;

import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/**
 * The real-time sink of {@code delivery: exactlyOnce} (docs/adr/0029): a real-time query's task
 * reads, scores and writes one data-topic partition for a whole batch, and Spark's foreach sink
 * (one of the sinks its real-time mode allows, {@code RealTimeModeAllowlist}) opens a writer per
 * task and batch ({@code ForeachDataWriter}: {@code open} when the task starts, {@code close(null)}
 * when its batch's rows have all come, {@code close(error)} after a failure). Each batch's task so
 * writes its partition in {@link PartitionTransactions}, one Kafka transaction per batch, committed
 * at the batch's end with the group's offset past it: {@code read_committed} readers see a batch's
 * predictions when it ends, about a trigger interval after its first record.
 *
 * <p>A batch read again after a failure (a real-time batch's end offsets are logged only when it
 * ends, so the restart reads from the batch's start for a new interval) writes only the records
 * past the group's committed offset.
 */
public final class TransactionalWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;

  private final PartitionTransactions transactions;
  private transient PartitionTransactions.Writes writes;

  public TransactionalWriter(PartitionTransactions transactions) {
    this.transactions = transactions;
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    writes = transactions.open(epochId); // the real-time batch's id
    return true;
  }

  @Override
  public void process(Row row) {
    writes.write(row);
  }

  @Override
  public void close(Throwable errorOrNull) {
    if (writes == null) return;
    try (PartitionTransactions.Writes w = writes) {
      writes = null;
      if (errorOrNull != null) {
        w.abort();
        return;
      }
      try {
        w.commit();
      } catch (Exception e) {
        w.abort();
        throw e instanceof RuntimeException re ? re : new IllegalStateException("exactly-once commit failed", e);
      }
    }
  }
}
