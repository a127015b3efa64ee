package dev.scorestream.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Map;

/**
 * A model the Kafka Streams peer serves: made from scorestream's JSON descriptor, scoring one
 * decoded record into scorestream's output JSON. The descriptor's format picks the kind, as it
 * does in scorestream: PMML (PMML4S) or a TensorFlow SavedModel (TensorFlow's Java API).
 */
interface ScoringModel {
  ObjectMapper MAPPER = new ObjectMapper();

  /** name:version, as scorestream's records name a model. */
  String route();

  /** Scores one decoded record and returns scorestream's output JSON for it. */
  byte[] score(Map<String, Object> fields, byte[] key, String topic, int partition, long offset, long eventTime)
      throws Exception;

  /** {name, version, dataType, format, data: base64, ...} */
  static ScoringModel fromDescriptor(String json) throws Exception {
    JsonNode d = MAPPER.readTree(json);
    if (!d.hasNonNull("data")) throw new IllegalArgumentException("descriptor has no inline data");
    String format = d.path("format").asText();
    switch (format) {
      case "pmml":
        return PmmlModel.fromDescriptor(d);
      case "tensorflow":
        return tensorFlow(d);
      default:
        throw new IllegalArgumentException("format '" + format + "' is not served by this peer");
    }
  }

  private static ScoringModel tensorFlow(JsonNode d) throws Exception {
    try {
      return TensorFlowModel.fromDescriptor(d);
    } catch (NoClassDefFoundError e) {
      // The PMML peer runs without TensorFlow's jars (benchmarks/kstreams.py): a model it cannot
      // serve, not a broken peer.
      throw new IllegalStateException("TensorFlow's Java API is not on this peer's classpath", e);
    }
  }

  /**
   * A record's field as a model input: a number, or why the record cannot be scored. The decoder's
   * own Double, not a new one: PMML4S takes it boxed.
   */
  static Double number(Map<String, Object> fields, String normalized, String input) {
    Object v = fields.get(normalized);
    if (!(v instanceof Double)) {
      throw new IllegalArgumentException("field '" + input + "' is " + (v == null ? "missing" : "not a number"));
    }
    return (Double) v;
  }
}
