package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

class RecordsTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static JsonNode prediction(byte[] key, String route, Double value, String label, Map<String, Double> outputs,
      long batchId) throws Exception {
    byte[] out = Records.prediction(key, "wine", 3, 42L, 1_700_000_000_123L, "red", route, value, label, outputs,
        2_500L, batchId);
    return JSON.readTree(out);
  }

  @Test
  void predictionCarriesSourceModelAndTimings() throws Exception {
    JsonNode r = prediction("k1".getBytes(StandardCharsets.UTF_8), "tree:3", 5.5, null, null, 7L);
    assertEquals("k1", r.get("key").asText());
    assertEquals("wine", r.at("/source/topic").asText());
    assertEquals(3, r.at("/source/partition").asInt());
    assertEquals(42L, r.at("/source/offset").asLong());
    assertEquals("red", r.get("dataType").asText());
    assertEquals("tree", r.at("/model/name").asText());
    assertEquals("3", r.at("/model/version").asText());
    assertEquals(5.5, r.get("prediction").asDouble());
    assertEquals("2023-11-14T22:13:20.123Z", r.at("/timings/eventTime").asText());
    assertEquals(2.5, r.at("/timings/scoringMicros").asDouble());
    assertTrue(r.at("/timings/scoredAt").asText().endsWith("Z"));
    assertEquals(7L, r.get("batchId").asLong());
  }

  @Test
  void nullsAreLeftOut() throws Exception {
    JsonNode r = prediction(null, "tree:3", null, null, null, -1L);
    for (String absent : List.of("key", "prediction", "label", "outputs", "batchId")) {
      assertFalse(r.has(absent), absent);
    }
  }

  @Test
  void outputsWriteNaNAsNullAndKeepTheirOrder() throws Exception {
    Map<String, Double> outputs = new LinkedHashMap<>();
    outputs.put("probability(good)", 0.75);
    outputs.put("probability(bad)", Double.NaN);
    outputs.put("missing", null);
    JsonNode r = prediction(null, "forest:1", null, "good", outputs, -1L);
    assertEquals("good", r.get("label").asText());
    List<String> names = new ArrayList<>();
    r.get("outputs").fieldNames().forEachRemaining(names::add);
    assertEquals(List.of("probability(good)", "probability(bad)", "missing"), names);
    assertEquals(0.75, r.at("/outputs/probability(good)").asDouble());
    assertTrue(r.get("outputs").get("probability(bad)").isNull());
    assertTrue(r.get("outputs").get("missing").isNull());
  }

  @Test
  void aRouteWithoutVersionHasAnEmptyOne() throws Exception {
    JsonNode r = prediction(null, "plain", 1.0, null, null, -1L);
    assertEquals("plain", r.at("/model/name").asText());
    assertEquals("", r.at("/model/version").asText());
  }

  @Test
  void stringsAreEscaped() throws Exception {
    byte[] out = Records.prediction(null, "t", 0, 0L, 0L, "a\"b\\c\n", "m:1", 1.0, "é\u0001", null, 0L, -1L);
    JsonNode r = JSON.readTree(out);
    assertEquals("a\"b\\c\n", r.get("dataType").asText());
    assertEquals("é\u0001", r.get("label").asText());
  }

  @Test
  void clockPadsMillisecondsAndHandlesTimesBeforeTheEpoch() {
    Records.Clock clock = new Records.Clock();
    assertEquals("1970-01-01T00:00:00.007Z", clock.iso(7L));
    assertEquals("1970-01-01T00:00:00.070Z", clock.iso(70L));
    assertEquals("1969-12-31T23:59:59.999Z", clock.iso(-1L));
    assertEquals("1970-01-01T00:00:01.000Z", clock.iso(1000L));
  }

  private static Map<String, String> headers(Row deadLetter) {
    Map<String, String> h = new LinkedHashMap<>();
    @SuppressWarnings("unchecked") // a Java list until Spark's encoder converts the row
    List<Row> rows = (List<Row>) deadLetter.get(2);
    for (Row r : rows) {
      h.put(r.getString(0), new String((byte[]) r.get(1), StandardCharsets.UTF_8));
    }
    return h;
  }

  @Test
  void deadLetterKeepsTheRecordsValueAndSaysWhy() {
    Records.Source src = new Records.Source(null, new byte[10], "wine", 2, 99L, 0L);
    Row dl = Records.deadLetter("wine-dlq", src, "score", "not a number", "tree:3", 5L);
    assertEquals("wine-dlq", dl.getString(0));
    assertNull(dl.get(1)); // null: the sink keeps the record's own value
    Map<String, String> h = headers(dl);
    assertEquals(List.of("scorestream.reason", "scorestream.stage", "scorestream.source.topic",
        "scorestream.source.partition", "scorestream.source.offset", "scorestream.model", "scorestream.batch"),
        new ArrayList<>(h.keySet()));
    assertEquals("not a number", h.get("scorestream.reason"));
    assertEquals("99", h.get("scorestream.source.offset"));
    assertEquals("5", h.get("scorestream.batch"));
  }

  @Test
  void deadLetterLeavesSheddingToTheSink() {
    // What does not fit the sink's max.request.size is shed by Scorer.sinkRows, which sizes key,
    // value and every header (tests/test_fuzz.py runs it against the real sink): the dead letter
    // itself keeps the record's own value whatever its size, and says nothing was dropped.
    byte[] key = new byte[1000];
    byte[] value = new byte[Records.MAX_RECORD_BYTES];
    Row dl = Records.deadLetter("d", new Records.Source(key, value, "wine", 0, 1L, 0L), "decode", "bad", null, 1L);
    assertNull(dl.get(1));
    assertFalse(headers(dl).containsKey("scorestream.value.dropped"));
    assertEquals("", headers(dl).get("scorestream.model"));
  }
}
