import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * What one input partition's transaction costs per batch, step by step, on the client the job's
 * sink runs (kafka-clients 3.9.2): as PartitionTransactions wrote every batch until it kept its
 * producers (a producer, initTransactions, a consumer and the committed-offset lookup, then the
 * transaction, then both closed), and with the producer kept (the transaction alone). Run by
 * benchmarks/eo_costs.py: java TransactionCosts.java BOOTSTRAP SOURCE OUT BATCHES RECORDS GAP_MS.
 */
public final class TransactionCosts {
  public static void main(String[] a) throws Exception {
    String bootstrap = a[0], source = a[1], out = a[2];
    int batches = Integer.parseInt(a[3]), records = Integer.parseInt(a[4]);
    long gapMs = Long.parseLong(a[5]);
    TopicPartition tp = new TopicPartition(source, 0);
    byte[] value = new byte[200];
    long next = 0;
    for (boolean kept : new boolean[] {false, true}) {
      String id = "costs-" + (kept ? "kept" : "per-batch"), group = id + "-group";
      Map<String, List<Long>> steps = new LinkedHashMap<>();
      KafkaProducer<byte[], byte[]> producer = null;
      for (int b = 0; b < batches; b++) {
        Thread.sleep(gapMs); // the rest of a batch: reading and scoring
        long t = System.nanoTime();
        if (producer == null) {
          producer = new KafkaProducer<>(producer(bootstrap, id));
          t = step(steps, "new producer", t);
          producer.initTransactions();
          t = step(steps, "initTransactions", t);
          try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumer(bootstrap, group))) {
            t = step(steps, "new consumer", t);
            c.committed(Collections.singleton(tp));
            t = step(steps, "committed-offset lookup", t);
          }
          t = step(steps, "consumer closed", t);
        }
        producer.beginTransaction();
        for (int i = 0; i < records; i++) producer.send(new ProducerRecord<>(out, value));
        producer.flush();
        t = step(steps, "records sent and flushed", t);
        next += records;
        producer.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(next)), new ConsumerGroupMetadata(group));
        t = step(steps, "sendOffsetsToTransaction", t);
        producer.commitTransaction();
        t = step(steps, "commitTransaction", t);
        if (!kept) {
          producer.close();
          producer = null;
          step(steps, "producer closed", t);
        }
      }
      if (producer != null) producer.close();
      System.out.printf("%s, %d batches of %d records, %d ms apart: median (p90) ms per batch%n",
          kept ? "producer kept" : "a producer per batch", batches, records, gapMs);
      double total = 0;
      for (Map.Entry<String, List<Long>> e : steps.entrySet()) {
        List<Long> v = new ArrayList<>(e.getValue());
        Collections.sort(v);
        double median = v.get(v.size() / 2) / 1e6, p90 = v.get((int) (v.size() * 0.9)) / 1e6;
        total += v.stream().mapToLong(Long::longValue).sum() / 1e6 / batches;
        System.out.printf("  %-28s %7.1f (%.1f)%n", e.getKey(), median, p90);
      }
      System.out.printf("  %-28s %7.1f mean%n", "total", total);
    }
  }

  private static long step(Map<String, List<Long>> steps, String name, long since) {
    long now = System.nanoTime();
    steps.computeIfAbsent(name, k -> new ArrayList<>()).add(now - since);
    return now;
  }

  private static Properties producer(String bootstrap, String id) {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    return p;
  }

  private static Properties consumer(String bootstrap, String group) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return p;
  }
}
