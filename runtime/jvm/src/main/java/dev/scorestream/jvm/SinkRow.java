package dev.scorestream.jvm;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF6;
import org.apache.spark.sql.types.DataType;

/**
 * What Spark's Kafka sink writes of one scored row: the topic the scorer chose, the record's key,
 * the prediction (or, for a dead letter, the record's own value), and a dead letter's headers
 * (its own, then the scorer's). A dead letter that would not fit the sink's
 * {@code max.request.size} (key, value and every header counted) sheds what it must, in this
 * order, each named by a header: its value ({@code value.dropped} = its bytes), then its own
 * headers ({@code headers.dropped} = how many), then its key ({@code key.dropped} = its bytes).
 * The scorer's own headers are bounded (Records.MAX_HEADER_BYTES), so every dead letter fits and
 * no record, of any size, fails the sink and with it the query.
 *
 * <p>One function, not a projection of SQL expressions: a real-time query analyses, optimizes
 * and generates code for its whole plan anew at every batch end while its records wait, and a
 * dozen expressions (sizes, levels, header arrays, lambdas) cost that far more than one call.
 */
final class SinkRow implements UDF6<String, byte[], byte[], byte[], scala.collection.Seq<Row>, scala.collection.Seq<Row>, Row> {
  private static final long serialVersionUID = 1L;

  static final String DDL = "topic STRING, key BINARY, value BINARY, headers " + Scorer.HEADERS_DDL;
  static final DataType TYPE = DataType.fromDDL(DDL);

  // Room per record (the batch's and the record's framing) and per header (its varints): what the
  // producer counts besides the bytes of keys and values, with a margin.
  static final int RECORD_FRAMING_BYTES = 1024;
  static final int HEADER_FRAMING_BYTES = 16;
  // Room for the markers saying what was shed: one, then two.
  private static final int ONE_MARKER_BYTES = 64;
  private static final int TWO_MARKERS_BYTES = 128;
  private static final byte[] EMPTY = new byte[0];

  private final long budget;

  SinkRow(int maxRequestBytes) {
    this.budget = (long) maxRequestBytes - RECORD_FRAMING_BYTES;
  }

  /**
   * {@code resultValue}: the scorer's (null for a dead letter, which keeps {@code value}, the
   * record's own); {@code own}: the record's headers; {@code dead}: the scorer's, null for a
   * prediction. Null for a row the scorer left without a topic (a draining real-time batch's).
   */
  @Override
  public Row call(String topic, byte[] key, byte[] resultValue, byte[] value, scala.collection.Seq<Row> own,
      scala.collection.Seq<Row> dead) {
    if (topic == null) return null;
    byte[] v = resultValue != null ? resultValue : value;
    if (dead == null) return RowFactory.create(topic, key, v, null);
    long kB = key == null ? 0 : key.length;
    long vB = v == null ? 0 : v.length;
    long oB = bytes(own);
    long dB = bytes(dead);
    int ownCount = own == null ? 0 : own.length();
    List<Row> headers = new ArrayList<>(ownCount + dead.length() + 3);
    if (kB + vB + oB + dB <= budget) {
      add(headers, own);
      add(headers, dead);
      return RowFactory.create(topic, key, v, headers);
    }
    if (kB + oB + dB + ONE_MARKER_BYTES <= budget) {
      add(headers, own);
      add(headers, dead);
      headers.add(Records.header("value.dropped", Long.toString(vB)));
      return RowFactory.create(topic, key, EMPTY, headers);
    }
    add(headers, dead);
    headers.add(Records.header("value.dropped", Long.toString(vB)));
    headers.add(Records.header("headers.dropped", Integer.toString(ownCount)));
    if (kB + dB + TWO_MARKERS_BYTES <= budget) return RowFactory.create(topic, key, EMPTY, headers);
    headers.add(Records.header("key.dropped", Long.toString(kB)));
    return RowFactory.create(topic, null, EMPTY, headers);
  }

  /** What the producer counts of headers: each one's key (UTF-8) and value, and its framing. */
  static long bytes(scala.collection.Seq<Row> headers) {
    if (headers == null) return 0;
    long n = 0;
    for (int i = 0; i < headers.length(); i++) {
      Row h = headers.apply(i);
      String k = h.getString(0);
      byte[] v = (byte[]) h.get(1);
      n += HEADER_FRAMING_BYTES + (k == null ? 0 : k.getBytes(StandardCharsets.UTF_8).length) + (v == null ? 0 : v.length);
    }
    return n;
  }

  private static void add(List<Row> into, scala.collection.Seq<Row> headers) {
    if (headers == null) return;
    for (int i = 0; i < headers.length(); i++) into.add(headers.apply(i));
  }
}
