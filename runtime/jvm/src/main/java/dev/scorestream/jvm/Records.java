package dev.scorestream.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.SerializableString;
import com.fasterxml.jackson.core.StreamWriteFeature;
import com.fasterxml.jackson.core.io.SerializedString;
import com.fasterxml.jackson.core.util.ByteArrayBuilder;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * What the job writes: the prediction record (JSON) for the output topic, and the headers a dead
 * letter carries. The field names are the contract in the README ("Output records", "Dead
 * letters"); nulls are left out, as Spark's to_json did before this moved into the JVM.
 */
public final class Records {
  private Records() {}

  static final String HEADER_PREFIX = "scorestream.";

  /**
   * The most a prediction record's key and value may hold together: a prediction repeats the
   * record's key, and one over Kafka's default limits (the producer's max.request.size, 1,048,576)
   * would fail the sink and with it the query. Dead letters are bounded by the sink's own setting
   * instead (Scorer.sinkRows).
   */
  static final int MAX_RECORD_BYTES = 1_000_000;
  // Formatting doubles is much of writing a prediction record: Jackson's fast writer (Schubfach)
  // gives the shortest representation that reads back as the same double, as Double.toString does.
  private static final JsonFactory JSON =
      JsonFactory.builder().enable(StreamWriteFeature.USE_FAST_DOUBLE_WRITER).build();
  private static final ThreadLocal<ByteArrayBuilder> BUFFER = ThreadLocal.withInitial(() -> new ByteArrayBuilder(512));
  // One clock per timestamp kind: event times and scoring times are seconds apart, and a clock
  // formats its second once.
  private static final ThreadLocal<Clock> EVENT_CLOCK = ThreadLocal.withInitial(Clock::new);
  private static final ThreadLocal<Clock> SCORED_CLOCK = ThreadLocal.withInitial(Clock::new);

  /** Where a record came from. */
  static final class Source {
    final byte[] key;
    final String topic;
    final int partition;
    final long offset;
    final long timestampMillis;
    final int valueBytes; // -1: not known here (a row back from TensorFlow)

    Source(byte[] key, String topic, Integer partition, Long offset, Long timestampMillis) {
      this(key, null, topic, partition, offset, timestampMillis);
    }

    Source(byte[] key, byte[] value, String topic, Integer partition, Long offset, Long timestampMillis) {
      this.key = key;
      this.valueBytes = value == null ? -1 : value.length;
      this.topic = topic;
      this.partition = partition == null ? -1 : partition;
      this.offset = offset == null ? -1 : offset;
      this.timestampMillis = timestampMillis == null ? 0 : timestampMillis;
    }
  }

  static byte[] prediction(Source src, String dataType, Slot s, long batchId) {
    return prediction(src.key, src.topic, src.partition, src.offset, src.timestampMillis, dataType, s.route,
        s.prediction, s.label, s.outputs, s.nanos, batchId);
  }

  /**
   * The prediction record. Public for the benchmark's Kafka Streams peer, which writes the same
   * record with this very code. {@code route} is {@code name:version}; {@code batchId} < 0: none.
   */
  public static byte[] prediction(byte[] key, String topic, int partition, long offset, long timestampMillis,
      String dataType, String route, Double prediction, String label, Map<String, Double> outputs, long nanos,
      long batchId) {
    ByteArrayBuilder buf = BUFFER.get();
    buf.reset();
    Quoted q = QUOTED.get();
    try (JsonGenerator g = JSON.createGenerator(buf)) {
      g.writeStartObject();
      if (key != null) {
        g.writeFieldName(KEY);
        g.writeString(new String(key, StandardCharsets.UTF_8));
      }
      g.writeFieldName(SOURCE);
      g.writeStartObject();
      g.writeFieldName(TOPIC);
      g.writeString(q.of(topic));
      g.writeFieldName(PARTITION);
      g.writeNumber(partition);
      g.writeFieldName(OFFSET);
      g.writeNumber(offset);
      g.writeEndObject();
      g.writeFieldName(DATA_TYPE);
      g.writeString(q.of(dataType));
      SerializableString[] model = q.model(route);
      g.writeFieldName(MODEL);
      g.writeStartObject();
      g.writeFieldName(NAME);
      g.writeString(model[0]);
      g.writeFieldName(VERSION);
      g.writeString(model[1]);
      g.writeEndObject();
      if (prediction != null) {
        g.writeFieldName(PREDICTION);
        g.writeNumber(prediction);
      }
      if (label != null) {
        g.writeFieldName(LABEL);
        g.writeString(q.of(label));
      }
      if (outputs != null) {
        g.writeFieldName(OUTPUTS);
        g.writeStartObject();
        for (Map.Entry<String, Double> e : outputs.entrySet()) {
          g.writeFieldName(q.of(e.getKey()));
          Double v = e.getValue();
          if (v == null || v.isNaN()) g.writeNull();
          else g.writeNumber(v);
        }
        g.writeEndObject();
      }
      g.writeFieldName(TIMINGS);
      g.writeStartObject();
      g.writeFieldName(EVENT_TIME);
      g.writeString(EVENT_CLOCK.get().iso(timestampMillis));
      g.writeFieldName(SCORED_AT);
      g.writeString(SCORED_CLOCK.get().iso(System.currentTimeMillis()));
      g.writeFieldName(SCORING_MICROS);
      g.writeNumber(nanos / 1e3);
      g.writeEndObject();
      if (batchId >= 0) {
        g.writeFieldName(BATCH_ID);
        g.writeNumber(batchId);
      }
      g.writeEndObject();
    } catch (IOException e) {
      throw new IllegalStateException(e); // writing to memory: cannot happen
    }
    return buf.toByteArray();
  }

  // The record's field names, quoted once: Jackson checks every character of a plain String for
  // escaping each time it writes it, and names were most of the strings a prediction writes.
  private static final SerializableString KEY = new SerializedString("key");
  private static final SerializableString SOURCE = new SerializedString("source");
  private static final SerializableString TOPIC = new SerializedString("topic");
  private static final SerializableString PARTITION = new SerializedString("partition");
  private static final SerializableString OFFSET = new SerializedString("offset");
  private static final SerializableString DATA_TYPE = new SerializedString("dataType");
  private static final SerializableString MODEL = new SerializedString("model");
  private static final SerializableString NAME = new SerializedString("name");
  private static final SerializableString VERSION = new SerializedString("version");
  private static final SerializableString PREDICTION = new SerializedString("prediction");
  private static final SerializableString LABEL = new SerializedString("label");
  private static final SerializableString OUTPUTS = new SerializedString("outputs");
  private static final SerializableString TIMINGS = new SerializedString("timings");
  private static final SerializableString EVENT_TIME = new SerializedString("eventTime");
  private static final SerializableString SCORED_AT = new SerializedString("scoredAt");
  private static final SerializableString SCORING_MICROS = new SerializedString("scoringMicros");
  private static final SerializableString BATCH_ID = new SerializedString("batchId");
  private static final ThreadLocal<Quoted> QUOTED = ThreadLocal.withInitial(Quoted::new);

  /**
   * The strings records repeat — topics, dataTypes, labels, output names, a route's model name and
   * version — quoted once per thread. Bounded: a model with ever-new labels only refills it.
   */
  static final class Quoted {
    private static final int MAX = 4096;
    private final HashMap<String, SerializableString> strings = new HashMap<>();
    private final HashMap<String, SerializableString[]> routes = new HashMap<>();

    SerializableString of(String s) {
      SerializableString q = strings.get(s);
      if (q == null) {
        if (strings.size() >= MAX) strings.clear();
        q = new SerializedString(s);
        strings.put(s, q);
      }
      return q;
    }

    /** {name, version} of a route {@code name:version} (no colon: the name, an empty version). */
    SerializableString[] model(String route) {
      SerializableString[] m = routes.get(route);
      if (m == null) {
        if (routes.size() >= MAX) routes.clear();
        int i = route.indexOf(':');
        m = new SerializableString[] {
          new SerializedString(i < 0 ? route : route.substring(0, i)),
          new SerializedString(i < 0 ? "" : route.substring(i + 1)),
        };
        routes.put(route, m);
      }
      return m;
    }
  }

  static int keyBytes(Source src) {
    return src.key == null ? 0 : src.key.length;
  }

  /**
   * A dead letter as the sink writes it: a null value keeps the record's own. One too large to
   * write with the headers sheds its value, its own headers, then its key ({@link
   * Scorer#sinkRows}); the source headers say where the record itself still is.
   */
  static Row deadLetter(String topic, Source src, String stage, String reason, String route, long batchId) {
    // A null value keeps the record's own; what does not fit the sink is shed by Scorer.sinkRows.
    return RowFactory.create(topic, null, deadHeaders(src, stage, reason, route, batchId), null);
  }

  /** The headers a dead letter adds to the record's own: why, where, which model, which batch. */
  static List<Row> deadHeaders(Source src, String stage, String reason, String route, long batchId) {
    List<Row> h = new ArrayList<>(8);
    h.add(header("reason", reason));
    h.add(header("stage", stage));
    h.add(header("source.topic", src.topic));
    h.add(header("source.partition", Integer.toString(src.partition)));
    h.add(header("source.offset", Long.toString(src.offset)));
    h.add(header("model", route == null ? "" : route));
    h.add(header("batch", Long.toString(batchId)));
    return h;
  }

  /**
   * The most characters of a header the job writes: a reason can name a record's dataType or
   * field, which are the producer's to choose (a 600,000-character dataType made a dead letter
   * larger than the sink takes). Four bytes a character at most in UTF-8.
   */
  static final int MAX_HEADER_CHARS = 500;

  static Row header(String name, String value) {
    return RowFactory.create(HEADER_PREFIX + name, value == null ? null : bounded(value).getBytes(StandardCharsets.UTF_8));
  }

  static String bounded(String value) {
    if (value.length() <= MAX_HEADER_CHARS) return value;
    int cut = MAX_HEADER_CHARS - 1;
    if (Character.isHighSurrogate(value.charAt(cut - 1))) cut--; // never half a character
    return value.substring(0, cut) + "\u2026";
  }

  /** ISO-8601 UTC with milliseconds; the part up to the second is formatted once per second. */
  static final class Clock {
    private static final DateTimeFormatter SECONDS =
        DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss").withZone(ZoneOffset.UTC);
    private long second = Long.MIN_VALUE;
    private String prefix;

    String iso(long millis) {
      long s = Math.floorDiv(millis, 1000);
      if (s != second) {
        second = s;
        prefix = SECONDS.format(Instant.ofEpochSecond(s));
      }
      int ms = (int) Math.floorMod(millis, 1000);
      StringBuilder b = new StringBuilder(24).append(prefix).append('.');
      if (ms < 100) b.append('0');
      if (ms < 10) b.append('0');
      return b.append(ms).append('Z').toString();
    }
  }
}
