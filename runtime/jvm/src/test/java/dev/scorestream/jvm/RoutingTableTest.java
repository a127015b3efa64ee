package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.List;
import org.junit.jupiter.api.Test;

class RoutingTableTest {
  static final String TABLE =
      "{\"dataTypeField\": \"data type\", \"served\": [\"red\"], \"batchId\": 4,"
          + " \"outputTopic\": \"out\", \"deadLetterTopic\": \"dlq\","
          + " \"routes\": {\"red\": {\"key\": \"tree:1\", \"format\": \"pmml\", \"file\": \"/m/tree.pmml\","
          + " \"inputs\": [\"alcohol\"], \"candidate\": {\"key\": \"tree:2\", \"format\": \"pmml\","
          + " \"file\": \"/m/tree2.pmml\", \"inputs\": [\"alcohol\"], \"mode\": \"canary\", \"share\": 2500}}}}";

  @Test
  void parsesRoutesAndTheirCandidates() {
    RoutingTable t = RoutingTable.parse(TABLE);
    assertEquals("data type", t.dataTypeField);
    assertEquals(List.of("red"), t.served);
    assertEquals(4L, t.batchId);
    RoutingTable.Route red = t.routes.get("red");
    assertEquals("tree:1", red.key);
    assertNull(red.mode);
    assertEquals("canary", red.candidate.mode);
    assertEquals(2500, red.candidate.share);
    assertNull(t.protobuf);
  }

  /** The message of the refusal, which always says what was refused. */
  private static String refusal(String json) {
    String message = assertThrows(IllegalArgumentException.class, () -> RoutingTable.parse(json)).getMessage();
    assertTrue(message.startsWith("bad routing table"), message);
    return message;
  }

  @Test
  void anUnknownFieldIsAnError() {
    assertTrue(refusal(TABLE.replace("\"batchId\"", "\"extra\": 1, \"batchId\"")).contains("extra"));
  }

  @Test
  void topicsAreRequired() {
    refusal("{\"outputTopic\": \"out\", \"routes\": {}}");
  }

  @Test
  void aRouteNeedsKeyFormatAndInputs() {
    refusal("{\"outputTopic\": \"o\", \"deadLetterTopic\": \"d\", \"routes\": {\"red\": {\"key\": \"k:1\", \"format\": \"pmml\"}}}");
  }

  @Test
  void anUnknownFormatIsRefusedInACandidateToo() {
    assertTrue(refusal(TABLE.replace("\"tree:2\", \"format\": \"pmml\"", "\"tree:2\", \"format\": \"onnx\"")).contains("onnx"));
  }

  @Test
  void aNullPrimitiveIsRefused() {
    refusal(TABLE.replace("\"batchId\": 4", "\"batchId\": null"));
  }

  @Test
  void shapeNamesEveryFieldWithItsJsonType() throws Exception {
    JsonNode shape = new ObjectMapper().readTree(RoutingTable.shape());
    assertEquals("object of Route", shape.at("/RoutingTable/routes").asText());
    assertEquals("object of array", shape.at("/RoutingTable/protobuf").asText());
    assertEquals("integer", shape.at("/RoutingTable/batchId").asText());
    assertEquals("array", shape.at("/RoutingTable/served").asText());
    assertEquals("Route", shape.at("/Route/candidate").asText());
    assertEquals("integer", shape.at("/Route/share").asText());
    assertEquals(7, shape.get("RoutingTable").size());
    assertEquals(7, shape.get("Route").size());
  }
}
