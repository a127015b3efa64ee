package dev.scorestream.jvm;

import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
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
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.api.java.function.ForeachPartitionFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * The sink of {@code delivery: exactlyOnce}: Kafka Streams' exactly-once mechanism, per input
 * partition, inside each Spark task (docs/adr/0026).
 *
 * <p>For every data-topic partition a task holds rows of, one Kafka transaction carries the
 * partition's predictions and dead letters and the data group's offset past its last record
 * ({@code sendOffsetsToTransaction}): outputs and progress become visible to {@code read_committed}
 * readers together or not at all. The transactional id is the job's prefix and the input
 * partition, the same in every attempt, executor and run, so a task's {@code initTransactions}
 * fences any earlier producer of that partition (a zombie task, an executor cut off, the driver
 * killed) and aborts its open transaction, or waits for the one it was committing. Only then is the
 * group's committed offset read: a batch that Spark replays after a failure (the same offset
 * ranges, from its offsets log, scored with the same model version) writes only the records past
 * it, which is nothing for a partition whose transaction committed before the failure.
 *
 * <p>The rows are {@link Scorer#sinkRows} with the source's partition and offset
 * ({@link #SOURCE_PARTITION}, {@link #SOURCE_OFFSET}). Each input partition must be wholly inside
 * one task: the Kafka source gives one Spark partition per topic partition, and coalescing keeps
 * parents whole.
 */
public final class TransactionalSink implements ForeachPartitionFunction<Row> {
  private static final long serialVersionUID = 1L;

  public static final String SOURCE_PARTITION = "srcPartition";
  public static final String SOURCE_OFFSET = "srcOffset";

  private final Map<String, String> producerProps;
  private final Map<String, String> consumerProps;
  private final String transactionalPrefix;
  private final String group;
  private final String sourceTopic;

  /**
   * @param clientProps the Java client's settings of the job (no {@code kafka.} prefix)
   * @param producerProps the sink producer's settings on top of them
   */
  public TransactionalSink(Map<String, String> clientProps, Map<String, String> producerProps,
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

  /** Write a batch's sink rows, one transaction per input partition. */
  public void write(Dataset<Row> rows) {
    rows.foreachPartition(this);
  }

  @Override
  public void call(Iterator<Row> rows) throws Exception {
    Map<Integer, Txn> open = new LinkedHashMap<>();
    KafkaConsumer<byte[], byte[]> offsets = null;
    try {
      int iTopic = -1, iKey = -1, iValue = -1, iHeaders = -1, iPart = -1, iOff = -1;
      while (rows.hasNext()) {
        Row row = rows.next();
        if (iTopic < 0) {
          iTopic = row.fieldIndex("topic");
          iKey = row.fieldIndex("key");
          iValue = row.fieldIndex("value");
          iHeaders = row.fieldIndex("headers");
          iPart = row.fieldIndex(SOURCE_PARTITION);
          iOff = row.fieldIndex(SOURCE_OFFSET);
        }
        int partition = row.getInt(iPart);
        long offset = row.getLong(iOff);
        Txn txn = open.get(partition);
        if (txn == null) {
          if (offsets == null) offsets = new KafkaConsumer<>(consumerProperties());
          txn = begin(partition, offsets);
          open.put(partition, txn);
        }
        if (offset < txn.committed) continue; // written and committed before this batch was replayed
        txn.next = Math.max(txn.next, offset + 1);
        txn.producer.send(record(row, iTopic, iKey, iValue, iHeaders), txn::sent);
        txn.written++;
      }
      for (Txn txn : open.values()) txn.commit();
    } catch (Exception e) {
      for (Txn txn : open.values()) txn.abandon();
      throw e;
    } finally {
      for (Txn txn : open.values()) txn.close();
      if (offsets != null) offsets.close();
    }
  }

  private static ProducerRecord<byte[], byte[]> record(Row row, int iTopic, int iKey, int iValue, int iHeaders) {
    RecordHeaders headers = new RecordHeaders();
    if (!row.isNullAt(iHeaders)) {
      List<Row> hs = row.getList(iHeaders);
      for (Row h : hs) headers.add(h.getString(0), h.isNullAt(1) ? null : (byte[]) h.get(1));
    }
    byte[] key = row.isNullAt(iKey) ? null : (byte[]) row.get(iKey);
    byte[] value = row.isNullAt(iValue) ? null : (byte[]) row.get(iValue);
    return new ProducerRecord<>(row.getString(iTopic), null, key, value, headers);
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
      return new Txn(producer, tp, c == null ? -1L : c.offset());
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

  /** One input partition's open transaction in this task. */
  private final class Txn {
    final KafkaProducer<byte[], byte[]> producer;
    final TopicPartition source;
    final long committed; // the group's offset when the task began: records below it are done
    final AtomicReference<Exception> failed = new AtomicReference<>();
    long next = -1; // the offset past the last record written
    long written;
    boolean done;

    Txn(KafkaProducer<byte[], byte[]> producer, TopicPartition source, long committed) {
      this.producer = producer;
      this.source = source;
      this.committed = committed;
    }

    void sent(org.apache.kafka.clients.producer.RecordMetadata m, Exception e) {
      if (e != null) failed.compareAndSet(null, e);
    }

    void commit() throws Exception {
      if (next < 0) {
        producer.abortTransaction(); // every record was committed already: nothing to add
      } else {
        producer.flush();
        if (failed.get() != null) throw failed.get(); // a failed send fails the task, never commits
        producer.sendOffsetsToTransaction(Collections.singletonMap(source, new OffsetAndMetadata(next)),
            new ConsumerGroupMetadata(group));
        producer.commitTransaction();
      }
      done = true;
    }

    void abandon() {
      if (done) return;
      try {
        producer.abortTransaction();
      } catch (RuntimeException ignored) {
        // Fenced or broken: the successor's initTransactions aborts what this one left open.
      }
    }

    void close() {
      producer.close();
    }
  }
}
