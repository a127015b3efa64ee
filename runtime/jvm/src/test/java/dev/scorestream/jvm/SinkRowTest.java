package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.junit.jupiter.api.Test;
import scala.jdk.javaapi.CollectionConverters;

/** What each kind of row becomes in the sink; tests/test_fuzz.py runs the shedding against the real one. */
class SinkRowTest {
  // A budget of 1,000 bytes after the record's framing.
  private static final SinkRow SINK = new SinkRow(1000 + SinkRow.RECORD_FRAMING_BYTES);
  private static final byte[] KEY = "k".getBytes(StandardCharsets.UTF_8);
  private static final byte[] PREDICTION = "{\"prediction\":5}".getBytes(StandardCharsets.UTF_8);

  private static scala.collection.Seq<Row> headers(Row... h) {
    return CollectionConverters.asScala(Arrays.asList(h)).toSeq();
  }

  private static Row header(String key, int bytes) {
    return RowFactory.create(key, new byte[bytes]);
  }

  @SuppressWarnings("unchecked")
  private static List<Row> headersOf(Row sunk) {
    return (List<Row>) sunk.get(3); // as the function returns it: Spark converts it for the sink
  }

  private static List<String> keys(Row sunk) {
    List<String> k = new ArrayList<>();
    for (Row h : headersOf(sunk)) k.add(h.getString(0));
    return k;
  }

  private static String value(Row sunk, String header) {
    for (Row h : headersOf(sunk)) {
      if (h.getString(0).equals(header)) return new String((byte[]) h.get(1), StandardCharsets.UTF_8);
    }
    return null;
  }

  @Test
  void aPredictionGoesWithItsKeyAndNoHeaders() {
    Row sunk = SINK.call("out", KEY, PREDICTION, new byte[5000], headers(header("own", 10)), null);
    assertEquals("out", sunk.getString(0));
    assertArrayEquals(KEY, (byte[]) sunk.get(1));
    assertArrayEquals(PREDICTION, (byte[]) sunk.get(2));
    assertNull(sunk.get(3));
  }

  @Test
  void aRowWithoutATopicIsNone() {
    assertNull(SINK.call(null, KEY, null, new byte[5], null, null));
  }

  @Test
  void aDeadLetterThatFitsKeepsItsValueItsHeadersThenTheScorers() {
    byte[] value = new byte[600];
    Row sunk = SINK.call("dlq", KEY, null, value, headers(header("own", 10)), headers(header("scorestream.reason", 10)));
    assertArrayEquals(value, (byte[]) sunk.get(2));
    assertEquals(List.of("own", "scorestream.reason"), keys(sunk));
  }

  @Test
  void aDeadLetterTooLargeShedsItsValueFirst() {
    Row sunk = SINK.call("dlq", KEY, null, new byte[2000], headers(header("own", 10)), headers(header("scorestream.reason", 10)));
    assertArrayEquals(new byte[0], (byte[]) sunk.get(2));
    assertArrayEquals(KEY, (byte[]) sunk.get(1));
    assertEquals(List.of("own", "scorestream.reason", "scorestream.value.dropped"), keys(sunk));
    assertEquals("2000", value(sunk, "scorestream.value.dropped"));
  }

  @Test
  void thenItsOwnHeaders() {
    Row sunk = SINK.call("dlq", KEY, null, new byte[50], headers(header("own", 900), header("own2", 1)),
        headers(header("scorestream.reason", 10)));
    assertEquals(List.of("scorestream.reason", "scorestream.value.dropped", "scorestream.headers.dropped"), keys(sunk));
    assertEquals("50", value(sunk, "scorestream.value.dropped"));
    assertEquals("2", value(sunk, "scorestream.headers.dropped"));
    assertArrayEquals(KEY, (byte[]) sunk.get(1));
  }

  @Test
  void thenItsKey() {
    Row sunk = SINK.call("dlq", new byte[980], null, new byte[3], null, headers(header("scorestream.reason", 10)));
    assertNull(sunk.get(1));
    assertEquals(List.of("scorestream.reason", "scorestream.value.dropped", "scorestream.headers.dropped",
        "scorestream.key.dropped"), keys(sunk));
    assertEquals("980", value(sunk, "scorestream.key.dropped"));
    assertEquals("0", value(sunk, "scorestream.headers.dropped"));
  }

  @Test
  void headersCountTheirKeysInUtf8AndTheirFraming() {
    assertEquals(2 * SinkRow.HEADER_FRAMING_BYTES + 2 + 3 + 4 + 0,
        SinkRow.bytes(headers(RowFactory.create("é", new byte[3]), RowFactory.create("😀", null))));
  }
}
