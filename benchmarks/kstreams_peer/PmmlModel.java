package dev.scorestream.bench;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamWriteFeature;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Base64;
import java.util.Map;
import dev.scorestream.jvm.PmmlOutputs;
import dev.scorestream.jvm.RecordFields;
import org.pmml4s.model.Model;

/**
 * A PMML model from scorestream's JSON descriptor, and one record through it: input decoding, field
 * matching are scorestream's own (RecordFields.decodeJson, RecordFields.normalize), so the two peers differ in
 * architecture, not in parsing; the output record has scorestream's fields.
 */
final class PmmlModel {
  private static final ObjectMapper MAPPER = new ObjectMapper();
  // As scorestream's own prediction records (Records.java): the same fast double writer, so the
  // two peers differ in their architecture, not in how they format numbers.
  private static final JsonFactory JSON =
      JsonFactory.builder().enable(StreamWriteFeature.USE_FAST_DOUBLE_WRITER).build();
  // Spark's to_json format for timestamps, as scorestream's timings carry them.
  private static final DateTimeFormatter TIME =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSXXX").withZone(ZoneOffset.UTC);

  final String name;
  final String version;
  private final Model model;
  private final String[] inputs;
  private final String[] normalized;
  private final PmmlOutputs outputs;

  private PmmlModel(String name, String version, Model model) {
    this.name = name;
    this.version = version;
    this.model = model;
    this.inputs = model.inputNames();
    this.normalized = new String[inputs.length];
    for (int i = 0; i < inputs.length; i++) normalized[i] = RecordFields.normalize(inputs[i]);
    this.outputs = new PmmlOutputs(model);
  }

  /** {name, version, dataType, format: "pmml", data: base64 PMML, ...} */
  static PmmlModel fromDescriptor(String json) throws Exception {
    JsonNode d = MAPPER.readTree(json);
    if (!"pmml".equals(d.path("format").asText())) {
      throw new IllegalArgumentException("format " + d.path("format") + " is not served by this peer");
    }
    if (!d.hasNonNull("data")) throw new IllegalArgumentException("descriptor has no inline data");
    byte[] pmml = Base64.getDecoder().decode(d.get("data").asText());
    return new PmmlModel(d.get("name").asText(), d.get("version").asText(), Model.fromBytes(pmml));
  }

  /** A reusable buffer for one stream thread's output records. */
  static final class Output {
    final ByteArrayOutputStream bytes = new ByteArrayOutputStream(1024);
  }

  /** Scores one decoded record and returns scorestream's output JSON for it. */
  byte[] score(Output buf, Map<String, Object> fields, byte[] key, String topic, int partition, long offset,
      long eventTime) throws Exception {
    Object[] in = new Object[inputs.length];
    for (int i = 0; i < inputs.length; i++) {
      Object v = fields.get(normalized[i]);
      if (!(v instanceof Double)) {
        throw new IllegalArgumentException("field '" + inputs[i] + "' is " + (v == null ? "missing" : "not a number"));
      }
      in[i] = v;
    }
    long t0 = System.nanoTime();
    Object[] out = model.predict((Object) in);
    long nanos = System.nanoTime() - t0;

    PmmlOutputs.Prediction p = outputs.read(out);
    if (p == null) throw new IllegalStateException("model produced no prediction");

    buf.bytes.reset();
    try (JsonGenerator g = JSON.createGenerator(buf.bytes, JsonEncoding.UTF8)) {
      g.writeStartObject();
      if (key != null) g.writeStringField("key", new String(key, StandardCharsets.UTF_8));
      g.writeObjectFieldStart("source");
      g.writeStringField("topic", topic);
      g.writeNumberField("partition", partition);
      g.writeNumberField("offset", offset);
      g.writeEndObject();
      g.writeStringField("dataType", (String) fields.get(KStreamsPeer.DATA_TYPE_FIELD));
      g.writeObjectFieldStart("model");
      g.writeStringField("name", name);
      g.writeStringField("version", version);
      g.writeEndObject();
      if (p.value != null) g.writeNumberField("prediction", p.value);
      if (p.label != null) g.writeStringField("label", p.label);
      g.writeObjectFieldStart("outputs");
      for (Map.Entry<String, Double> e : p.outputs.entrySet()) {
        if (e.getValue() == null) g.writeNullField(e.getKey());
        else g.writeNumberField(e.getKey(), e.getValue());
      }
      g.writeEndObject();
      g.writeObjectFieldStart("timings");
      g.writeStringField("eventTime", TIME.format(Instant.ofEpochMilli(eventTime)));
      g.writeStringField("scoredAt", TIME.format(Instant.now()));
      g.writeNumberField("scoringMicros", nanos / 1e3);
      g.writeEndObject();
      g.writeEndObject();
    }
    return buf.bytes.toByteArray();
  }
}
