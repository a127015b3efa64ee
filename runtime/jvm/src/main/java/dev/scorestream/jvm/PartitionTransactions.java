package dev.scorestream.jvm;

import java.io.Serializable;
import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka Streams' exactly-once mechanism, per input partition, inside one Spark task: what both
 * writers of {@code delivery: exactlyOnce} do (docs/adr/0029). {@link TransactionalSink} runs it
 * over a micro-batch's partition, {@link TransactionalWriter} over a real-time batch's task.
 *
 * <p>For every data-topic partition a task holds rows of, one Kafka transaction carries the
 * partition's predictions and dead letters and the data group's offset past its last record
 * ({@code sendOffsetsToTransaction}): outputs and progress become visible to {@code read_committed}
 * readers together or not at all. The transactional id is the job's prefix and the input
 * partition, the same in every attempt, executor and run, so {@code initTransactions} fences any
 * earlier producer of that partition (a zombie task, an executor cut off, the driver killed) and
 * aborts its open transaction, or waits for the one it was committing. Only then is the group's
 * committed offset read: a batch that Spark reads again after a failure writes only the records
 * past it, which is nothing for a partition whose transaction committed before the failure.
 *
 * <p>A partition's producer outlives its task ({@link TransactionalProducers}): the next batch's
 * task on the same executor takes it, with the offset its last commit left, and goes straight to
 * its transaction. Fencing, the lookup and a producer's start are paid when a partition comes to
 * an executor, not at every batch.
 *
 * <p>The rows are {@link Scorer#sinkRowsWithSource}: topic, key, value, headers, and the source's
 * partition and offset ({@link #SOURCE_PARTITION}, {@link #SOURCE_OFFSET}). Each input partition
 * must be wholly inside one task, its rows in offset order: the Kafka source gives one Spark
 * partition per topic partition, and coalescing keeps parents whole.
 */
public final class PartitionTransactions implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(PartitionTransactions.class);

  public static final String SOURCE_PARTITION = "srcPartition";
  public static final String SOURCE_OFFSET = "srcOffset";

  private final HashMap<String, String> producerProps;
  private final HashMap<String, String> consumerProps;
  private final String transactionalPrefix;
  private final String group;
  private final String sourceTopic;

  /**
   * @param clientProps the Java client's settings of the job (no {@code kafka.} prefix)
   * @param producerProps the sink producer's settings on top of them
   */
  public PartitionTransactions(Map<String, String> clientProps, Map<String, String> producerProps,
      String transactionalPrefix, String group, String sourceTopic) {
    this.consumerProps = new HashMap<>(clientProps);
    this.producerProps = new HashMap<>(clientProps);
    this.producerProps.putAll(producerProps);
    this.transactionalPrefix = transactionalPrefix;
    this.group = group;
    this.sourceTopic = sourceTopic;
  }

  /** The transactional id of one input partition's writer. */
  public static String transactionalId(String prefix, int partition) {
    return prefix + "-" + partition;
  }

  /**
   * A task's writes in batch {@code batch} (the micro-batch's or real-time batch's id): begin with
   * {@link Writes#write}, end with commit or abort, then close.
   */
  public Writes open(long batch) {
    return new Writes(batch);
  }

  /**
   * Which of an input partition's records a transaction writes, and the offset it commits: those
   * at or past the group's committed offset when it began (the rest were written and committed
   * before the batch was read again), the offset past the last of them.
   */
  static final class Progress {
    final long committed; // the group's offset when the transaction began; -1: never committed
    private long next = -1;

    Progress(long committed) {
      this.committed = committed;
    }

    /** Whether the record at {@code offset} is to be written; if so, it moves the offset to commit. */
    boolean admit(long offset) {
      if (offset < committed) return false;
      next = Math.max(next, offset + 1);
      return true;
    }

    /** Whether a record was admitted: else there is nothing to commit. */
    boolean wrote() {
      return next >= 0;
    }

    /** The offset the transaction commits to the group: past the last record admitted. */
    long next() {
      if (next < 0) throw new IllegalStateException("no record admitted: nothing to commit");
      return next;
    }
  }

  /** One task's transactions, one per input partition it met; not thread-safe (one task). */
  public final class Writes implements AutoCloseable {
    private final long batch;
    private final Map<Integer, Txn> open = new LinkedHashMap<>();
    private KafkaConsumer<byte[], byte[]> offsets;
    private int iTopic = -1, iKey, iValue, iHeaders, iPart, iOff;

    private Writes(long batch) {
      this.batch = batch;
    }

    /** Send a row in its input partition's transaction (begun at its first row), unless committed already. */
    public void write(Row row) {
      if (iTopic < 0) {
        iTopic = row.fieldIndex("topic");
        iKey = row.fieldIndex("key");
        iValue = row.fieldIndex("value");
        iHeaders = row.fieldIndex("headers");
        iPart = row.fieldIndex(SOURCE_PARTITION);
        iOff = row.fieldIndex(SOURCE_OFFSET);
      }
      int partition = row.getInt(iPart);
      Txn txn = open.get(partition);
      if (txn == null) {
        txn = begin(partition);
        open.put(partition, txn);
      }
      if (!txn.progress.admit(row.getLong(iOff))) return;
      txn.producer.send(record(row), txn::sent);
    }

    /** Commit each partition's outputs with its offset; a failed send fails it, never commits. */
    public void commit() throws Exception {
      for (Txn txn : open.values()) txn.commit();
    }

    /** Abort what is open; a fenced or broken producer's transaction its successor aborts. */
    public void abort() {
      for (Txn txn : open.values()) txn.abandon();
    }

    /** Producers whose transaction neither committed nor aborted (a task that failed before either) are closed. */
    @Override
    public void close() {
      for (Txn txn : open.values()) if (!txn.done) txn.discard();
      open.clear();
      if (offsets != null) offsets.close();
      offsets = null;
    }

    /** Whether the partition's transaction runs on the producer kept from the batch before (tests). */
    boolean onKeptProducer(int partition) {
      return open.get(partition).kept;
    }

    private ProducerRecord<byte[], byte[]> record(Row row) {
      RecordHeaders headers = new RecordHeaders();
      if (!row.isNullAt(iHeaders)) {
        List<Row> hs = row.getList(iHeaders);
        for (Row h : hs) headers.add(h.getString(0), h.isNullAt(1) ? null : (byte[]) h.get(1));
      }
      byte[] key = row.isNullAt(iKey) ? null : (byte[]) row.get(iKey);
      byte[] value = row.isNullAt(iValue) ? null : (byte[]) row.get(iValue);
      return new ProducerRecord<>(row.getString(iTopic), null, key, value, headers);
    }

    /**
     * The partition's transaction: on the producer kept from its previous batch, or on a new one
     * that fences earlier writers of the partition and then reads how far its outputs are committed.
     */
    private Txn begin(int partition) {
      TopicPartition tp = new TopicPartition(sourceTopic, partition);
      TransactionalProducers.Key key = key(partition);
      TransactionalProducers.Kept kept = TransactionalProducers.take(key, batch);
      KafkaProducer<byte[], byte[]> producer =
          kept != null ? kept.producer : new KafkaProducer<>(producerProperties(key.transactionalId()));
      long committed;
      try {
        if (kept != null) {
          committed = kept.committed;
        } else {
          producer.initTransactions();
          committed = committedOffset(tp);
        }
        producer.beginTransaction();
      } catch (RuntimeException e) {
        producer.close(Duration.ZERO);
        throw e;
      }
      // What a replay skips, for whoever reads an executor's log after a failure.
      LOG.info("Transaction begun for {} in batch {}: its outputs are committed up to offset {} ({})", tp, batch,
          committed < 0 ? "none" : committed, kept != null ? "its producer kept from the batch before" : "a new producer");
      return new Txn(key, producer, tp, new Progress(committed), batch, kept != null);
    }

    // read_committed: the fetch waits for offsets still pending in a transaction (KIP-447), so a
    // predecessor's commit that initTransactions let finish is seen here.
    private long committedOffset(TopicPartition tp) {
      if (offsets == null) offsets = new KafkaConsumer<>(consumerProperties());
      OffsetAndMetadata c = offsets.committed(Collections.singleton(tp)).get(tp);
      return c == null ? -1L : c.offset();
    }
  }

  private TransactionalProducers.Key key(int partition) {
    Map<String, String> settings = new HashMap<>(producerProps);
    return new TransactionalProducers.Key(transactionalId(transactionalPrefix, partition), settings, group);
  }

  private Properties producerProperties(String transactionalId) {
    Properties p = new Properties();
    p.putAll(producerProps);
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    // A batch's task may write for longer than the client's default minute (a backlog read in one
    // batch on a loaded executor); a successor's initTransactions aborts a zombie's sooner anyway.
    p.putIfAbsent(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "300000");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    return p;
  }

  private Properties consumerProperties() {
    Properties p = new Properties();
    p.putAll(consumerProps);
    p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return p;
  }

  /**
   * One input partition's open transaction in a task. Ended (committed or aborted), its producer
   * is kept for the partition's next batch with the offset the group is now at; failed, it is closed.
   */
  private final class Txn {
    final TransactionalProducers.Key key;
    final KafkaProducer<byte[], byte[]> producer;
    final TopicPartition source;
    final Progress progress;
    final long batch;
    final boolean kept; // on the producer of the partition's batch before
    final AtomicReference<Exception> failed = new AtomicReference<>();
    boolean done;

    Txn(TransactionalProducers.Key key, KafkaProducer<byte[], byte[]> producer, TopicPartition source,
        Progress progress, long batch, boolean kept) {
      this.key = key;
      this.producer = producer;
      this.source = source;
      this.progress = progress;
      this.batch = batch;
      this.kept = kept;
    }

    void sent(RecordMetadata m, Exception e) {
      if (e != null) failed.compareAndSet(null, e);
    }

    void commit() throws Exception {
      if (done) return;
      try {
        if (!progress.wrote()) {
          producer.abortTransaction(); // every record was committed already: nothing to add
          keep(progress.committed);
          return;
        }
        producer.flush();
        if (failed.get() != null) throw failed.get(); // a failed send fails the task, never commits
        producer.sendOffsetsToTransaction(Collections.singletonMap(source, new OffsetAndMetadata(progress.next())),
            new ConsumerGroupMetadata(group));
        producer.commitTransaction();
        keep(progress.next());
      } catch (Exception e) {
        discard(); // fenced, broken, or a commit whose outcome is unknown: its offset is no longer known
        throw e;
      }
    }

    /** Abort; a producer that cannot (fenced or broken) is closed: its successor's initTransactions aborts what it left open. */
    void abandon() {
      if (done) return;
      try {
        producer.abortTransaction();
      } catch (RuntimeException e) {
        LOG.warn("Aborting the transaction for {} failed; its producer is closed", source, e);
        discard();
        return;
      }
      keep(progress.committed);
    }

    private void keep(long committed) {
      done = true;
      TransactionalProducers.keep(key, producer, committed, batch);
    }

    void discard() {
      done = true;
      producer.close(Duration.ZERO);
    }
  }
}
