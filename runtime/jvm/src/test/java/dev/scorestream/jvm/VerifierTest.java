package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The verifier with PMML4S itself, on a linear model small enough to read: y = 1 + 2x. */
class VerifierTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String PMML =
      "<PMML xmlns=\"http://www.dmg.org/PMML-4_4\" version=\"4.4\"><Header/>"
          + "<DataDictionary numberOfFields=\"2\">"
          + "<DataField name=\"x\" optype=\"continuous\" dataType=\"double\"/>"
          + "<DataField name=\"y\" optype=\"continuous\" dataType=\"double\"/>"
          + "</DataDictionary>"
          + "<RegressionModel functionName=\"regression\">"
          + "<MiningSchema><MiningField name=\"x\"/><MiningField name=\"y\" usageType=\"target\"/></MiningSchema>"
          + "<RegressionTable intercept=\"1\"><NumericPredictor name=\"x\" coefficient=\"2\"/></RegressionTable>"
          + "<ModelVerification recordCount=\"2\">"
          + "<VerificationFields><VerificationField field=\"x\"/>"
          + "<VerificationField field=\"y\" column=\"expected\" precision=\"0.01\"/></VerificationFields>"
          + "<InlineTable><row><x>1</x><expected>3</expected></row><row><x>2.5</x><expected>6</expected></row></InlineTable>"
          + "</ModelVerification>"
          + "</RegressionModel></PMML>";

  @TempDir Path dir;

  private ObjectNode request(String pmml) throws Exception {
    ObjectNode req = JSON.createObjectNode();
    if (pmml != null) {
      Path model = dir.resolve("linear.pmml");
      Files.writeString(model, pmml);
      req.put("model", model.toString());
    }
    return req;
  }

  private static JsonNode run(ObjectNode req) throws Exception {
    return JSON.readTree(Verifier.run(JSON.writeValueAsString(req)));
  }

  @Test
  void describesTheModelAndScoresItsEmbeddedRows() throws Exception {
    JsonNode answer = run(request(PMML));
    assertEquals("[\"x\"]", answer.get("inputs").toString());
    assertEquals("y", answer.get("target").asText());
    assertFalse(answer.get("classification").asBoolean());
    JsonNode embedded = answer.get("embedded");
    assertEquals("2", embedded.get("recordCount").asText());
    assertEquals("expected", embedded.at("/fields/1/column").asText());
    assertEquals(0.01, embedded.at("/fields/1/precision").asDouble());
    assertEquals(1e-6, embedded.at("/fields/0/precision").asDouble()); // the PMML default
    assertEquals(3.0, embedded.at("/results/0/prediction").asDouble(), 1e-9);
    assertEquals(6.0, embedded.at("/results/1/prediction").asDouble(), 1e-9);
    assertFalse(answer.get("timedOut").asBoolean());
  }

  @Test
  void scoresTheSampleAndSaysWhyARecordFails() throws Exception {
    ObjectNode req = request(PMML);
    ArrayNode sample = req.putArray("sample");
    sample.add("{\"x\": 4}").add("{\"x\": \"four\"}").add("not json");
    JsonNode results = run(req).get("sample");
    assertEquals(3, results.size());
    assertEquals(9.0, results.at("/0/prediction").asDouble(), 1e-9);
    assertTrue(results.at("/0/error").isNull());
    assertTrue(results.at("/1/prediction").isNull());
    assertFalse(results.at("/1/error").isNull());
    assertEquals("decode", results.at("/2/stage").asText());
  }

  @Test
  void withoutAModelOnlyDecodesTheSample() throws Exception {
    ObjectNode req = request(null);
    req.putArray("inputs").add("x");
    req.putArray("sample").add("{\"X\": 2, \"other\": 1}");
    JsonNode answer = run(req);
    assertFalse(answer.has("embedded"));
    assertEquals(1, answer.get("sample").size());
    assertThrows(IllegalArgumentException.class, () -> Verifier.run("{\"sample\": []}"));
  }

  @Test
  void stopsAtTheDeadline() throws Exception {
    ObjectNode req = request(PMML);
    req.put("timeoutMillis", 0);
    req.putArray("sample").add("{\"x\": 1}");
    JsonNode answer = run(req);
    assertTrue(answer.get("timedOut").asBoolean());
    assertEquals(0, answer.get("sample").size());
  }

  @Test
  void writesTheAnswerToAFileWhenAsked() throws Exception {
    ObjectNode req = request(PMML);
    Path answerFile = dir.resolve("answer.json");
    req.put("answerFile", answerFile.toString());
    assertEquals("", Verifier.run(JSON.writeValueAsString(req)));
    assertEquals("y", JSON.readTree(answerFile.toFile()).get("target").asText());
  }

  @Test
  void aModelWithADoctypeIsRefusedBeforePmml4sReadsIt() throws Exception {
    ObjectNode req = request("<!DOCTYPE PMML []>" + PMML);
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> run(req));
    assertTrue(e.getMessage().startsWith(SafeXml.DOCTYPE_REFUSED), e.getMessage());
  }

  @Test
  void anUnknownRequestFieldIsAnError() {
    assertThrows(Exception.class, () -> Verifier.run("{\"inputs\": [\"x\"], \"surprise\": 1}"));
  }
}
