package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.GenericRowWithSchema;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A partition's transactional producer kept across batches, on a real broker: the next batch goes
 * on with it and commits each record once; another writer of its transactional id (another
 * executor, a second task of the partition) fences it, and then no transaction of it commits and
 * the batch run again writes only what the other did not. The broker is the one
 * tests/test_broker.py's session starts ({@code SCORESTREAM_TEST_BOOTSTRAP}); without one the
 * tests are skipped (`mvn test` alone, the jar's build).
 */
class PartitionTransactionsBrokerTest {
  private static final String BOOTSTRAP = System.getenv("SCORESTREAM_TEST_BOOTSTRAP");
  private static final StructType ROWS = new StructType()
      .add("topic", DataTypes.StringType)
      .add("key", DataTypes.BinaryType)
      .add("value", DataTypes.BinaryType)
      .add("headers", DataTypes.createArrayType(new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType)))
      .add(PartitionTransactions.SOURCE_PARTITION, DataTypes.IntegerType)
      .add(PartitionTransactions.SOURCE_OFFSET, DataTypes.LongType);

  private String data, out, group, prefix;
  private PartitionTransactions txns;

  @BeforeEach
  void topics() throws Exception {
    assumeTrue(BOOTSTRAP != null, "SCORESTREAM_TEST_BOOTSTRAP: a broker (tests/test_broker.py)");
    String run = UUID.randomUUID().toString().substring(0, 8);
    data = "txp-data-" + run;
    out = "txp-out-" + run;
    group = "txp-group-" + run;
    prefix = "txp." + run + ".tx." + data;
    try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, BOOTSTRAP))) {
      admin.createTopics(List.of(new NewTopic(data, 1, (short) 1), new NewTopic(out, 1, (short) 1))).all().get();
    }
    txns = new PartitionTransactions(Map.of("bootstrap.servers", BOOTSTRAP), Map.of("linger.ms", "5"), prefix, group, data);
  }

  @AfterEach
  void closeKept() {
    TransactionalProducers.closeAll();
  }

  private Row row(long offset) {
    byte[] key = Long.toString(offset).getBytes(StandardCharsets.UTF_8);
    return new GenericRowWithSchema(new Object[] {out, key, key, null, 0, offset}, ROWS);
  }

  /** One task of batch {@code batch} writing partition 0's records {@code from} to {@code to} (excluded). */
  private void task(long batch, long from, long to, boolean kept) throws Exception {
    try (PartitionTransactions.Writes w = txns.open(batch)) {
      try {
        for (long o = from; o < to; o++) w.write(row(o));
        assertEquals(kept, w.onKeptProducer(0));
        w.commit();
      } catch (Exception e) {
        w.abort();
        throw e;
      }
    }
  }

  /** Another executor's writer of partition 0: fences whoever held the id, commits record `offset`. */
  private void anotherWriterCommits(long offset) {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, BOOTSTRAP);
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, PartitionTransactions.transactionalId(prefix, 0));
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    try (KafkaProducer<byte[], byte[]> other = new KafkaProducer<>(p)) {
      other.initTransactions();
      other.beginTransaction();
      byte[] key = Long.toString(offset).getBytes(StandardCharsets.UTF_8);
      other.send(new ProducerRecord<>(out, key, key));
      other.sendOffsetsToTransaction(Map.of(new TopicPartition(data, 0), new OffsetAndMetadata(offset + 1)),
          new ConsumerGroupMetadata(group));
      other.commitTransaction();
    }
  }

  /** The source offsets a read_committed reader finds in the output, in order, and the group's committed offset. */
  private List<Long> committedOutput() {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, BOOTSTRAP);
    p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    List<Long> seen = new ArrayList<>();
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      TopicPartition tp = new TopicPartition(out, 0);
      c.assign(List.of(tp));
      c.seekToBeginning(List.of(tp));
      long end = c.endOffsets(List.of(tp)).get(tp); // the last stable offset: past the last transaction ended
      long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
      while (c.position(tp) < end) {
        assertTrue(System.nanoTime() < deadline, "the output not read to " + end + " in 30 s");
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
          seen.add(Long.parseLong(new String(r.key(), StandardCharsets.UTF_8)));
        }
      }
      TopicPartition source = new TopicPartition(data, 0);
      seen.add(-c.committed(Collections.singleton(source)).get(source).offset()); // negated: told apart
    }
    return seen;
  }

  /** Whether the broker refused a producer as fenced: the exception or its cause (a send refused after it). */
  private static boolean fenced(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof ProducerFencedException || t instanceof InvalidProducerEpochException) return true;
    }
    return false;
  }

  private static List<Long> range(long from, long to) {
    List<Long> r = new ArrayList<>();
    for (long o = from; o < to; o++) r.add(o);
    return r;
  }

  private static List<Long> withGroupAt(List<Long> offsets, long group) {
    List<Long> r = new ArrayList<>(offsets);
    r.add(-group);
    return r;
  }

  @Test
  void theNextBatchGoesOnWithThePartitionsProducerAndEachRecordIsCommittedOnce() throws Exception {
    task(0, 0, 10, false);
    task(1, 10, 20, true);
    task(2, 20, 25, true);
    assertEquals(withGroupAt(range(0, 25), 25), committedOutput());
  }

  @Test
  void aKeptProducerFencedByAnotherExecutorCommitsNothingAndTheBatchAgainWritesOnlyTheRest() throws Exception {
    task(0, 0, 10, false);
    anotherWriterCommits(10); // batch 1's task ran elsewhere too, and committed record 10 first
    Exception e = assertThrows(Exception.class, () -> task(1, 10, 20, true));
    assertTrue(fenced(e), e.toString());
    assertEquals(0, TransactionalProducers.idle()); // closed, never given back
    task(1, 10, 20, false); // Spark's next attempt: a new producer, the group's offset read (11)
    assertEquals(withGroupAt(range(0, 20), 20), committedOutput());
  }

  @Test
  void aPartitionBackFromAnotherExecutorStartsANewProducerThatReadsWhereTheOtherLeftIt() throws Exception {
    task(0, 0, 10, false);
    anotherWriterCommits(10); // batch 1 on another executor
    task(2, 11, 20, false); // batch 2 back here: not the kept producer (a gap), and no failure
    assertEquals(withGroupAt(range(0, 20), 20), committedOutput());
  }

  @Test
  void ofTwoTasksOfAPartitionAtOnceTheLaterFencesTheEarlier() throws Exception {
    task(0, 0, 10, false);
    try (PartitionTransactions.Writes first = txns.open(1)) {
      for (long o = 10; o < 15; o++) first.write(row(o)); // on the kept producer
      assertTrue(first.onKeptProducer(0));
      task(1, 10, 20, false); // a second attempt of batch 1 meanwhile: a new producer, which fences the first
      assertTrue(fenced(assertThrows(Exception.class, first::commit)));
      first.abort();
    }
    task(2, 20, 22, true); // the second's producer is the one kept
    assertEquals(withGroupAt(range(0, 22), 22), committedOutput());
  }

  @Test
  void recordsTheKeptProducerKnowsCommittedAreNotWrittenAgainAndItIsKept() throws Exception {
    task(0, 0, 10, false);
    task(1, 5, 12, true); // 5..9 committed by batch 0: only 10 and 11 written
    task(2, 0, 12, true); // all committed: the transaction is aborted, the producer kept
    assertEquals(1, TransactionalProducers.idle());
    assertEquals(withGroupAt(range(0, 12), 12), committedOutput());
  }
}
