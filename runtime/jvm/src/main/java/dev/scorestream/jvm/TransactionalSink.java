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
public final class TransactionalSink implements ForeachPartitionFunction<Row> {
  private static final long serialVersionUID = 1L;

  private final PartitionTransactions transactions;

  public TransactionalSink(PartitionTransactions transactions) {
    this.transactions = transactions;
  }

  /** Write a batch's sink rows ({@link Scorer#sinkRowsWithSource}), one transaction per input partition. */
  public void write(Dataset<Row> rows) {
    rows.foreachPartition(this);
  }

  @Override
  public void call(Iterator<Row> rows) throws Exception {
    try (PartitionTransactions.Writes writes = transactions.open()) {
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
