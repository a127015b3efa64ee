package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.scorestream.jvm.TransactionalProducers.Key;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Which batch takes a kept producer, and when one is closed. Real producers, never connected (no
 * call of theirs needs a broker before {@code initTransactions}); the transactions themselves:
 * {@link PartitionTransactionsBrokerTest}.
 */
class TransactionalProducersTest {
  private static final Key KEY = new Key("scorestream.ns.job.tx.data-0", Map.of("bootstrap.servers", "127.0.0.1:9"), "g");

  @AfterEach
  void closeKept() {
    TransactionalProducers.closeAll();
  }

  static KafkaProducer<byte[], byte[]> producer() {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9"); // the discard port: nothing listens
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, KEY.transactionalId());
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    return new KafkaProducer<>(p);
  }

  /** A closed producer refuses every call first thing; an open one refuses a transaction before initTransactions. */
  static boolean closed(KafkaProducer<byte[], byte[]> p) {
    RuntimeException e = assertThrows(RuntimeException.class, p::beginTransaction);
    return e.getMessage().contains("producer has been closed");
  }

  @Test
  void theNextBatchTakesTheProducerWithTheOffsetItLeft() {
    KafkaProducer<byte[], byte[]> p = producer();
    TransactionalProducers.keep(KEY, p, 42, 7);
    TransactionalProducers.Kept k = TransactionalProducers.take(KEY, 8);
    assertSame(p, k.producer);
    assertEquals(42, k.committed);
    assertEquals(0, TransactionalProducers.idle()); // one task holds it at a time
    assertFalse(closed(p));
    p.close();
  }

  @Test
  void aBatchAfterAGapStartsANewProducerAndTheKeptOneIsClosed() {
    // Batches 8 and 9 ran on another executor, whose initTransactions fenced this producer.
    KafkaProducer<byte[], byte[]> p = producer();
    TransactionalProducers.keep(KEY, p, 42, 7);
    assertNull(TransactionalProducers.take(KEY, 10));
    assertTrue(closed(p));
  }

  @Test
  void theSameBatchAgainStartsANewProducer() {
    // A retry of batch 7: what the kept producer knows may be of an attempt fenced since.
    KafkaProducer<byte[], byte[]> p = producer();
    TransactionalProducers.keep(KEY, p, 42, 7);
    assertNull(TransactionalProducers.take(KEY, 7));
    assertTrue(closed(p));
  }

  @Test
  void ofTwoProducersGivenBackForAPartitionTheLaterStaysAndTheOtherIsClosed() {
    KafkaProducer<byte[], byte[]> first = producer(), second = producer();
    TransactionalProducers.keep(KEY, first, 10, 7);
    TransactionalProducers.keep(KEY, second, 12, 7);
    assertTrue(closed(first));
    assertSame(second, TransactionalProducers.take(KEY, 8).producer);
    second.close();
  }

  @Test
  void aProducerIdleTooLongIsClosed() {
    KafkaProducer<byte[], byte[]> p = producer(), other = producer();
    Key otherKey = new Key("scorestream.ns.job.tx.data-1", KEY.settings(), KEY.group());
    TransactionalProducers.keep(KEY, p, 42, 7);
    TransactionalProducers.keep(otherKey, other, 5, 3);
    long later = System.currentTimeMillis() + TransactionalProducers.IDLE_LIMIT_MS + 1;
    assertNull(TransactionalProducers.take(KEY, 8, later));
    assertTrue(closed(p));
    assertTrue(closed(other)); // any partition's: swept by whichever task comes
    assertEquals(0, TransactionalProducers.idle());
  }

  @Test
  void anotherJobsProducerIsNotTaken() {
    KafkaProducer<byte[], byte[]> p = producer();
    TransactionalProducers.keep(KEY, p, 42, 7);
    Key otherSettings = new Key(KEY.transactionalId(), Map.of("bootstrap.servers", "127.0.0.1:10"), KEY.group());
    assertNull(TransactionalProducers.take(otherSettings, 8));
    assertSame(p, TransactionalProducers.take(KEY, 8).producer);
    p.close();
  }
}
