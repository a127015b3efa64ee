package dev.scorestream.jvm;

import java.io.Serializable;
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

  /** A task's writes: begin with {@link Writes#write}, end with commit or abort, then close. */
  public Writes open() {
    return new Writes();
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
    private final Map<Integer, Txn> open = new LinkedHashMap<>();
    private KafkaConsumer<byte[], byte[]> offsets;
    private int iTopic = -1, iKey, iValue, iHeaders, iPart, iOff;

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
        if (offsets == null) offsets = new KafkaConsumer<>(consumerProperties());
        txn = begin(partition, offsets);
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

    @Override
    public void close() {
      for (Txn txn : open.values()) txn.producer.close();
      open.clear();
      if (offsets != null) offsets.close();
      offsets = null;
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
  }

  /** Fence earlier writers of the partition, then read how far its outputs are committed. */
  private Txn begin(int partition, KafkaConsumer<byte[], byte[]> offsets) {
    Properties p = new Properties();
    p.putAll(producerProps);
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId(transactionalPrefix, partition));
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    // A batch's task may write for longer than the client's default minute (a backlog read in one
    // batch on a loaded executor); a successor's initTransactions aborts a zombie's sooner anyway.
    p.putIfAbsent(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "300000");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
    try {
      producer.initTransactions();
      TopicPartition tp = new TopicPartition(sourceTopic, partition);
      // read_committed: the fetch waits for offsets still pending in a transaction (KIP-447), so
      // a predecessor's commit that initTransactions let finish is seen here.
      OffsetAndMetadata c = offsets.committed(Collections.singleton(tp)).get(tp);
      producer.beginTransaction();
      // What a replay skips, for whoever reads an executor's log after a failure.
      LOG.info("Transaction begun for {}: its outputs are committed up to offset {}", tp, c == null ? "none" : c.offset());
      return new Txn(producer, tp, new Progress(c == null ? -1L : c.offset()));
    } catch (RuntimeException e) {
      producer.close();
      throw e;
    }
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

  /** One input partition's open transaction in a task. */
  private final class Txn {
    final KafkaProducer<byte[], byte[]> producer;
    final TopicPartition source;
    final Progress progress;
    final AtomicReference<Exception> failed = new AtomicReference<>();
    boolean done;

    Txn(KafkaProducer<byte[], byte[]> producer, TopicPartition source, Progress progress) {
      this.producer = producer;
      this.source = source;
      this.progress = progress;
    }

    void sent(RecordMetadata m, Exception e) {
      if (e != null) failed.compareAndSet(null, e);
    }

    void commit() throws Exception {
      if (done) return;
      if (!progress.wrote()) {
        producer.abortTransaction(); // every record was committed already: nothing to add
      } else {
        producer.flush();
        if (failed.get() != null) throw failed.get(); // a failed send fails the task, never commits
        producer.sendOffsetsToTransaction(Collections.singletonMap(source, new OffsetAndMetadata(progress.next())),
            new ConsumerGroupMetadata(group));
        producer.commitTransaction();
      }
      done = true;
    }

    void abandon() {
      if (done) return;
      done = true;
      try {
        producer.abortTransaction();
      } catch (RuntimeException ignored) {
        // Fenced or broken: the successor's initTransactions aborts what this one left open.
      }
    }
  }
}
