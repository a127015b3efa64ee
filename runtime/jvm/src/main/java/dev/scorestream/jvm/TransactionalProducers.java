package dev.scorestream.jvm;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.KafkaProducer;

/**
 * The transactional producers of this JVM (an executor's), kept between batches: a partition's
 * producer, its {@code initTransactions} done, and the offset its last transaction left the data
 * group at (docs/adr/0029). A task takes its partition's producer and gives it back once its
 * transaction committed or aborted; a producer that failed is closed instead, never given back.
 *
 * <p>Why a kept producer may skip {@code initTransactions} and the committed-offset lookup: while
 * it is not fenced, no other writer of its transactional id has begun since its last commit, and
 * the group's offset for the partition is committed by that id alone; so the offset it knows is the
 * group's. Whether it is fenced the broker says at its next transaction, which then fails (Spark
 * runs the task again, on a new producer): nothing is committed on a stale offset. A producer is
 * only taken by the batch right after the one it last wrote: a gap means the partition's tasks ran
 * elsewhere meanwhile (another executor, whose {@code initTransactions} fenced this one), so it is
 * closed rather than failing a task. One task at a time holds a producer; a second task of the
 * partition meanwhile (a retry while the first still runs) starts its own, which fences the first.
 */
final class TransactionalProducers {
  /** A partition's writer as the job configures it: the cache's key. */
  record Key(String transactionalId, Map<String, String> settings, String group) {}

  /** A producer between transactions and the group's offset its transactions left (-1: none). */
  static final class Kept {
    final KafkaProducer<byte[], byte[]> producer;
    final long committed;
    final long batch; // the batch whose transaction it ended last
    final long idleSince;

    Kept(KafkaProducer<byte[], byte[]> producer, long committed, long batch, long idleSince) {
      this.producer = producer;
      this.committed = committed;
      this.batch = batch;
      this.idleSince = idleSince;
    }
  }

  /**
   * A producer idle for longer is closed: its partition has moved to another executor for good, or
   * the stream has paused; its connections and buffers are freed, and the next batch starts anew.
   */
  static final long IDLE_LIMIT_MS = 10 * 60_000L;

  private static final Map<Key, Kept> IDLE = new HashMap<>();

  static {
    // An executor that stops closes its idle producers (none has a transaction open).
    Runtime.getRuntime().addShutdownHook(new Thread(TransactionalProducers::closeAll, "scorestream-transactional-producers"));
  }

  private TransactionalProducers() {}

  /**
   * The key's producer if it ended the previous batch's transaction of the partition, else null
   * (and a producer kept from longer ago is closed). Idle producers past {@link #IDLE_LIMIT_MS} go too.
   */
  static Kept take(Key key, long batch) {
    return take(key, batch, System.currentTimeMillis());
  }

  static Kept take(Key key, long batch, long now) {
    List<Kept> stale = new ArrayList<>();
    Kept found;
    synchronized (IDLE) {
      found = IDLE.remove(key);
      if (found != null && found.batch != batch - 1) {
        stale.add(found);
        found = null;
      }
      for (Iterator<Kept> it = IDLE.values().iterator(); it.hasNext(); ) {
        Kept k = it.next();
        if (now - k.idleSince > IDLE_LIMIT_MS) {
          stale.add(k);
          it.remove();
        }
      }
    }
    stale.forEach(TransactionalProducers::close);
    if (found != null && now - found.idleSince > IDLE_LIMIT_MS) {
      close(found);
      return null;
    }
    return found;
  }

  /**
   * A producer whose transaction of {@code batch} committed or aborted, kept for the next batch with
   * the group's offset it left. Another producer of the key idle meanwhile (a concurrent task's,
   * given back first) is closed: of two tasks of one batch the later one's producer fenced it.
   */
  static void keep(Key key, KafkaProducer<byte[], byte[]> producer, long committed, long batch) {
    Kept previous;
    synchronized (IDLE) {
      previous = IDLE.put(key, new Kept(producer, committed, batch, System.currentTimeMillis()));
    }
    if (previous != null && previous.producer != producer) close(previous);
  }

  /** How many producers are idle (tests). */
  static int idle() {
    synchronized (IDLE) {
      return IDLE.size();
    }
  }

  /** Close every idle producer: at the JVM's exit, and between tests. */
  static void closeAll() {
    List<Kept> all;
    synchronized (IDLE) {
      all = new ArrayList<>(IDLE.values());
      IDLE.clear();
    }
    all.forEach(TransactionalProducers::close);
  }

  // An idle producer has no transaction open and nothing buffered: closing it waits for nothing.
  private static void close(Kept k) {
    k.producer.close(Duration.ZERO);
  }
}
