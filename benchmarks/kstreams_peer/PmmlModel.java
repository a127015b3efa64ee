package dev.scorestream.bench;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import dev.scorestream.jvm.RecordFields;
import org.pmml4s.metadata.OutputField;
import org.pmml4s.model.Model;

/**
 * A PMML model from scorestream's JSON descriptor, and one record through it: input decoding, field
 * matching are scorestream's own (RecordFields.decodeJson, RecordFields.normalize), so the two peers differ in
 * architecture, not in parsing; the output record has scorestream's fields.
 */
final class PmmlModel {
  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final JsonFactory JSON = new JsonFactory();
  // Spark's to_json format for timestamps, as scorestream's timings carry them.
  private static final DateTimeFormatter TIME =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSXXX").withZone(ZoneOffset.UTC);

  final String name;
  final String version;
  private final Model model;
  private final String[] inputs;
  private final String[] normalized;
  private final String[] outputNames;
  private final int predicted; // index of the predictedValue output, or -1
  private final int[] probability; // indexes of probability(x) outputs
  private final String[] probabilityLabel;

  private PmmlModel(String name, String version, Model model) {
    this.name = name;
    this.version = version;
    this.model = model;
    this.inputs = model.inputNames();
    this.normalized = new String[inputs.length];
    for (int i = 0; i < inputs.length; i++) normalized[i] = RecordFields.normalize(inputs[i]);
    this.outputNames = model.outputNames();
    int p = -1;
    List<Integer> prob = new ArrayList<>();
    List<String> labels = new ArrayList<>();
    OutputField[] fields = model.outputFields();
    for (int i = 0; i < fields.length; i++) {
      String feature = fields[i].feature().toString();
      if (feature.equals("predictedValue") && p < 0) p = i;
      if (feature.equals("probability") && fields[i].value().isDefined()) {
        prob.add(i);
        labels.add(String.valueOf(fields[i].value().get()));
      }
    }
    this.predicted = p;
    this.probability = prob.stream().mapToInt(Integer::intValue).toArray();
    this.probabilityLabel = labels.toArray(new String[0]);
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

    String label = null;
    Double prediction = null;
    if (predicted >= 0 && out[predicted] instanceof Number) {
      prediction = ((Number) out[predicted]).doubleValue();
    } else {
      if (predicted >= 0 && out[predicted] != null) label = out[predicted].toString();
      if (label == null && probability.length > 0) {
        double best = Double.NEGATIVE_INFINITY;
        for (int j = 0; j < probability.length; j++) {
          Object o = out[probability[j]];
          if (o instanceof Number && ((Number) o).doubleValue() > best) {
            best = ((Number) o).doubleValue();
            label = probabilityLabel[j];
          }
        }
      }
      if (label != null) {
        try {
          prediction = Double.parseDouble(label);
        } catch (NumberFormatException ignored) {
          // a non-numeric class label: reported in `label` only
        }
      }
    }
    if (prediction == null && label == null) throw new IllegalStateException("model produced no prediction");

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
      if (prediction != null) g.writeNumberField("prediction", prediction);
      if (label != null) g.writeStringField("label", label);
      g.writeObjectFieldStart("outputs");
      for (int i = 0; i < out.length; i++) {
        if (out[i] instanceof Number) {
          double v = ((Number) out[i]).doubleValue();
          if (Double.isNaN(v)) g.writeNullField(outputNames[i]);
          else g.writeNumberField(outputNames[i], v);
        }
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
