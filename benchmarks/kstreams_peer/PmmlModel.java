package dev.scorestream.bench;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.pmml4s.metadata.OutputField;
import org.pmml4s.model.Model;

/**
 * A PMML model from scorestream's JSON descriptor, and one record through it: input decoding, field
 * matching and the output record follow scorestream's JVM scorer (runtime/jvm, Scorer.java).
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
    for (int i = 0; i < inputs.length; i++) normalized[i] = normalize(inputs[i]);
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

  /** Lower case, runs of anything but letters and digits become one underscore (as scorestream). */
  static String normalize(String name) {
    StringBuilder b = new StringBuilder(name.length());
    boolean gap = false;
    for (int i = 0; i < name.length(); i++) {
      char c = Character.toLowerCase(name.charAt(i));
      if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
        if (gap && b.length() > 0) b.append('_');
        b.append(c);
        gap = false;
      } else {
        gap = true;
      }
    }
    return b.toString();
  }

  // Jackson hands out canonical (interned) field names: one normalisation per name and thread.
  private static final ThreadLocal<IdentityHashMap<String, String>> NAMES =
      ThreadLocal.withInitial(IdentityHashMap::new);

  private static String normalizedName(String name) {
    IdentityHashMap<String, String> cache = NAMES.get();
    String n = cache.get(name);
    if (n == null) {
      if (cache.size() > 4096) cache.clear();
      n = normalize(name);
      cache.put(name, n);
    }
    return n;
  }

  /** A JSON object's top-level fields: numbers as Double, strings as String, anything else FALSE. */
  static Map<String, Object> decodeJson(byte[] value) throws Exception {
    if (value == null) throw new IllegalArgumentException("record has no value");
    Map<String, Object> out = new HashMap<>(32);
    try (JsonParser p = JSON.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) throw new IllegalArgumentException("not a JSON object");
      JsonToken t;
      while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
        String name = normalizedName(p.currentName());
        switch (p.nextToken()) {
          case VALUE_NUMBER_INT:
          case VALUE_NUMBER_FLOAT:
            out.put(name, p.getDoubleValue());
            break;
          case VALUE_STRING:
            out.put(name, p.getText());
            break;
          case START_OBJECT:
          case START_ARRAY:
            p.skipChildren();
            out.put(name, Boolean.FALSE);
            break;
          default:
            out.put(name, Boolean.FALSE);
        }
      }
      if (t != JsonToken.END_OBJECT) throw new IllegalArgumentException("malformed JSON object");
    }
    return out;
  }
}
