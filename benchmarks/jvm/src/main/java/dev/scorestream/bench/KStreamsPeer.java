package dev.scorestream.bench;

import dev.scorestream.jvm.RecordFields;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The reference architecture as a benchmark peer: Kafka Streams + PMML4S (or TensorFlow's Java API,
 * for a TensorFlow SavedModel: ScoringModel), one model per dataType.
 *
 * <p>Model descriptors (scorestream's JSON, keyed by dataType) are read from the models topic into a
 * global store that every stream thread shares; the global thread parses each new model once, and
 * the stream threads take the parsed model from that cache (or from the store, for models restored
 * at start-up). Data records are consumed through the application's consumer group, scored and
 * written as scorestream's output JSON. Records that cannot be decoded or scored are counted and
 * skipped (this peer keeps no dead-letter topic).
 *
 * <pre>KStreamsPeer BOOTSTRAP APPLICATION_ID DATA_TOPIC OUTPUT_TOPIC MODELS_TOPIC STATE_DIR [streams.key=value...]</pre>
 */
public final class KStreamsPeer {
  static final String STORE = "models";
  static final String DATA_TYPE_FIELD = "datatype"; // "dataType", normalised as record keys are

  /** Parsed models by dataType: written by the global thread, read by the stream threads. */
  static final Map<String, ScoringModel> MODELS = new ConcurrentHashMap<>();

  static final LongAdder SCORED = new LongAdder();
  static final LongAdder FAILED = new LongAdder();

  public static void main(String[] args) throws Exception {
    if (args.length < 6) {
      System.err.println("usage: KStreamsPeer BOOTSTRAP APPLICATION_ID DATA OUTPUT MODELS STATE_DIR [key=value...]");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    // Output batches as large as the records allow, sent within 5 ms.
    props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
    props.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), 256 * 1024);
    for (int i = 6; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      props.put(kv[0], kv[1]);
    }

    StreamsBuilder builder = new StreamsBuilder();
    builder.addGlobalStore(
        Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(STORE), Serdes.String(), Serdes.String())
            .withLoggingDisabled(), // a global store's changelog is its source topic
        args[4],
        Consumed.with(Serdes.String(), Serdes.String()),
        ModelUpdater::new);
    builder.stream(args[2], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .processValues(Scoring::new)
        .to(args[3], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setStateListener((now, before) -> {
      System.out.println("state " + now);
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) stopped.countDown();
    });
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close(Duration.ofSeconds(20));
      System.out.println("scored " + SCORED.sum() + " failed " + FAILED.sum());
    }));
    streams.start();
    stopped.await();
  }

  /** The global store's update processor: keeps the descriptor JSON and parses the model once. */
  static final class ModelUpdater implements Processor<String, String, Void, Void> {
    private KeyValueStore<String, String> store;

    @Override
    public void init(ProcessorContext<Void, Void> context) {
      store = context.getStateStore(STORE);
    }

    @Override
    public void process(Record<String, String> record) {
      String dataType = record.key();
      if (dataType == null) return;
      if (record.value() == null) { // a tombstone withdraws the model
        store.delete(dataType);
        MODELS.remove(dataType);
        return;
      }
      try {
        ScoringModel model = ScoringModel.fromDescriptor(record.value());
        store.put(dataType, record.value()); // first the store, then the cache: see Scoring.model
        MODELS.put(dataType, model);
        System.out.println("model " + dataType + " -> " + model.route());
      } catch (Exception e) { // keep serving the previous model
        System.out.println("model " + dataType + " rejected: " + e);
      }
    }
  }

  /** One record in, its prediction out (same key); nothing out for a record that fails. */
  static final class Scoring implements FixedKeyProcessor<byte[], byte[], byte[]> {
    private FixedKeyProcessorContext<byte[], byte[]> context;
    private KeyValueStore<String, String> store;

    @Override
    public void init(FixedKeyProcessorContext<byte[], byte[]> context) {
      this.context = context;
      this.store = context.getStateStore(STORE);
    }

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> record) {
      try {
        Map<String, Object> fields = RecordFields.decodeJson(record.value());
        Object dataType = fields.get(DATA_TYPE_FIELD);
        ScoringModel model = dataType instanceof String ? model((String) dataType) : null;
        if (model == null) {
          FAILED.increment();
          return;
        }
        RecordMetadata source = context.recordMetadata().orElseThrow();
        byte[] value = model.score(fields, record.key(), source.topic(), source.partition(),
            source.offset(), record.timestamp());
        context.forward(record.withValue(value));
        SCORED.increment();
      } catch (Exception e) {
        FAILED.increment();
      }
    }

    /** The parsed model; on a miss (a model restored at start-up), parsed from the store once. */
    private ScoringModel model(String dataType) {
      ScoringModel m = MODELS.get(dataType);
      if (m != null) return m;
      // Under the map's lock for this key: an update by the global thread (store first, then
      // cache) either waits for this and overwrites it, or is seen here.
      return MODELS.computeIfAbsent(dataType, k -> {
        String descriptor = store.get(k);
        try {
          return descriptor == null ? null : ScoringModel.fromDescriptor(descriptor);
        } catch (Exception e) {
          return null;
        }
      });
    }
  }
}
