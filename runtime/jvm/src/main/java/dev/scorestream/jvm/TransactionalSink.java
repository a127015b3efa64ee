package dev.scorestream.jvm;

import java.util.Iterator;
import org.apache.spark.api.java.function.ForeachPartitionFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * The micro-batch sink of {@code delivery: exactlyOnce} (docs/adr/0029): each task writes its
 * rows in {@link PartitionTransactions}, one Kafka transaction per input partition, committed when
 * the task's rows are all sent. A batch Spark replays (the same offset ranges from its offsets
 * log, scored with the model version pinned for the batch) writes only what no transaction
 * committed.
 */
public final class TransactionalSink {
  private final PartitionTransactions transactions;

  public TransactionalSink(PartitionTransactions transactions) {
    this.transactions = transactions;
  }

  /**
   * Write batch {@code batch}'s sink rows ({@link Scorer#sinkRowsWithSource}), one transaction per
   * input partition; the batch's id lets a partition's producer of the batch before go on (ADR 29).
   */
  public void write(Dataset<Row> rows, long batch) {
    rows.foreachPartition(new Task(transactions, batch));
  }

  /** One task's rows of a batch. */
  private record Task(PartitionTransactions transactions, long batch) implements ForeachPartitionFunction<Row> {
    @Override
    public void call(Iterator<Row> rows) throws Exception {
      try (PartitionTransactions.Writes writes = transactions.open(batch)) {
        try {
          while (rows.hasNext()) writes.write(rows.next());
          writes.commit();
        } catch (Exception e) {
          writes.abort();
          throw e;
        }
      }
    }
  }
}
