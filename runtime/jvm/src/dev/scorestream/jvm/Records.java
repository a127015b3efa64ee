package dev.scorestream.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.StreamWriteFeature;
import com.fasterxml.jackson.core.util.ByteArrayBuilder;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * What the job writes: the prediction record (JSON) for the output topic, and the headers a dead
 * letter carries. The field names are the contract in the README ("Output records", "Dead
 * letters"); nulls are left out, as Spark's to_json did before this moved into the JVM.
 */
final class Records {
  private Records() {}

  static final String HEADER_PREFIX = "scorestream.";

  /**
   * The most a written record's key and value may hold together. Kafka's default limits (the
   * producer's max.request.size, 1,048,576; the broker's message.max.bytes, 1,048,588) also count
   * headers and batch framing: a record the data topic took at its limit no longer fits once a
   * dead letter's headers are added, and the sink's RecordTooLargeException fails the whole query,
   * so one record could stop the job. Below this bound there is room for the headers.
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
    ByteArrayBuilder buf = BUFFER.get();
    buf.reset();
    try (JsonGenerator g = JSON.createGenerator(buf)) {
      g.writeStartObject();
      if (src.key != null) g.writeStringField("key", new String(src.key, StandardCharsets.UTF_8));
      g.writeObjectFieldStart("source");
      g.writeStringField("topic", src.topic);
      g.writeNumberField("partition", src.partition);
      g.writeNumberField("offset", src.offset);
      g.writeEndObject();
      g.writeStringField("dataType", dataType);
      g.writeObjectFieldStart("model");
      g.writeStringField("name", s.name());
      g.writeStringField("version", s.version());
      g.writeEndObject();
      if (s.prediction != null) g.writeNumberField("prediction", s.prediction);
      if (s.label != null) g.writeStringField("label", s.label);
      if (s.outputs != null) {
        g.writeObjectFieldStart("outputs");
        for (Map.Entry<String, Double> e : s.outputs.entrySet()) {
          Double v = e.getValue();
          if (v == null || v.isNaN()) g.writeNullField(e.getKey());
          else g.writeNumberField(e.getKey(), v);
        }
        g.writeEndObject();
      }
      g.writeObjectFieldStart("timings");
      g.writeStringField("eventTime", EVENT_CLOCK.get().iso(src.timestampMillis));
      g.writeStringField("scoredAt", SCORED_CLOCK.get().iso(System.currentTimeMillis()));
      g.writeNumberField("scoringMicros", s.nanos / 1e3);
      g.writeEndObject();
      g.writeNumberField("batchId", batchId);
      g.writeEndObject();
    } catch (IOException e) {
      throw new IllegalStateException(e); // writing to memory: cannot happen
    }
    return buf.toByteArray();
  }

  static int keyBytes(Source src) {
    return src.key == null ? 0 : src.key.length;
  }

  /**
   * A dead letter as the sink writes it: a null value keeps the record's own. One too large to
   * write with the headers goes without its value (empty), with header {@code value.dropped} = its
   * length in bytes; the source headers say where the record itself still is.
   */
  static Row deadLetter(String topic, Source src, String stage, String reason, String route, long batchId) {
    List<Row> h = deadHeaders(src, stage, reason, route, batchId);
    byte[] value = null;
    if (keyBytes(src) + Math.max(src.valueBytes, 0) > MAX_RECORD_BYTES) {
      value = new byte[0];
      h.add(header("value.dropped", Integer.toString(src.valueBytes)));
    }
    return RowFactory.create(topic, value, h, null);
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

  private static Row header(String name, String value) {
    return RowFactory.create(HEADER_PREFIX + name, value == null ? null : value.getBytes(StandardCharsets.UTF_8));
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
