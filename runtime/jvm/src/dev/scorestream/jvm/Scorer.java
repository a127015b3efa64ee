package dev.scorestream.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;
import org.apache.spark.SparkFiles;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;
import org.pmml4s.model.Model;

/**
 * Decodes, routes and (for PMML) scores one record inside Spark's JVM.
 *
 * <p>Called once per record as a Spark SQL UDF: {@code ss_score(routes, key, value)}. {@code routes} is
 * the batch's routing table as a JSON literal: the driver fixes it at the start of a micro-batch,
 * so every partition of that batch sees the same model per dataType. Parsed tables and loaded
 * PMML models are cached per JVM, keyed by the table text and the model file, so a model is parsed
 * once per executor and a swap costs one parse.
 *
 * <p>During a canary, a record goes to the candidate when the CRC32 of its key (of its value if
 * it has no key) falls in the candidate's share of 10,000 buckets: the same key always meets the
 * same version. During a shadow, {@link Shadow} also scores every record with the candidate and
 * returns that result in extra columns, which are compared and never written.
 *
 * <p>Never throws for a bad record: the result names the failing stage and reason, and the job
 * sends such records to the dead-letter topic.
 */
public class Scorer implements UDF3<String, byte[], byte[], Row> {
  private static final long serialVersionUID = 1L;

  /** Result columns, in order. Keep in sync with RESULT_DDL (pipeline.py). */
  public static final String RESULT_DDL =
      "dataType STRING, route STRING, stage STRING, error STRING, features ARRAY<DOUBLE>, "
          + "prediction DOUBLE, label STRING, outputs MAP<STRING, DOUBLE>, nanos BIGINT";

  static final int BASE = 9;
  static final int WIDE = 15;

  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final JsonFactory JSON = new JsonFactory();
  private static final Map<String, Table> TABLES = new ConcurrentHashMap<>();
  private static final Map<String, Pmml> MODELS = new ConcurrentHashMap<>();

  @Override
  public Row call(String routes, byte[] key, byte[] value) {
    return RowFactory.create(score(routes, key, value, false));
  }

  /** The scorer during a shadow: six more columns with the candidate's result. */
  // Spark looks for the UDF interface on the class itself, not on its superclass.
  public static final class Shadow extends Scorer implements UDF3<String, byte[], byte[], Row> {
    private static final long serialVersionUID = 1L;

    public static final String RESULT_DDL =
        Scorer.RESULT_DDL
            + ", shadowRoute STRING, shadowError STRING, shadowFeatures ARRAY<DOUBLE>, "
            + "shadowPrediction DOUBLE, shadowLabel STRING, shadowNanos BIGINT";

    @Override
    public Row call(String routes, byte[] key, byte[] value) {
      return RowFactory.create(score(routes, key, value, true));
    }
  }

  static Object[] score(String routes, byte[] key, byte[] value, boolean shadow) {
    int width = shadow ? WIDE : BASE;
    Table table = TABLES.get(routes);
    if (table == null) {
      if (TABLES.size() >= 8) TABLES.clear(); // older batches' tables: a swap happened
      table = TABLES.computeIfAbsent(routes, Table::parse);
    }
    Map<String, Object> fields;
    try {
      fields = table.protobuf == null ? decodeJson(value) : Protobuf.decode(value, table.protobuf);
    } catch (Exception e) {
      return failure(width, null, null, "decode", message(e));
    }
    Object dt = fields.get(table.dataTypeField);
    if (!(dt instanceof String)) {
      String why = dt == null ? "missing" : "not a string";
      return failure(width, null, null, "decode", "field '" + table.dataTypeName + "' is " + why);
    }
    String dataType = (String) dt;
    Route route = table.routes.get(dataType);
    if (route == null) {
      String why =
          table.served == null || table.served.contains(dataType)
              ? "no model is serving dataType '" + dataType + "'"
              : "dataType '" + dataType + "' is not served by this job";
      return failure(width, dataType, null, "route", why);
    }
    Route candidate = route.candidate;
    if (candidate != null && candidate.share > 0 && bucket(key, value) < candidate.share) {
      return evaluate(width, dataType, candidate, fields);
    }
    Object[] out = evaluate(width, dataType, route, fields);
    if (shadow && candidate != null && "shadow".equals(candidate.mode) && out[2] == null) {
      Object[] s = evaluate(BASE, dataType, candidate, fields);
      out[9] = s[1];
      out[10] = s[2] == null ? null : s[2] + ": " + s[3];
      out[11] = s[4];
      out[12] = s[5];
      out[13] = s[6];
      out[14] = s[8];
    }
    return out;
  }

  /** 0..9999 from the record's key: which records a canary gets. */
  static int bucket(byte[] key, byte[] value) {
    CRC32 crc = new CRC32();
    byte[] b = key != null ? key : value;
    if (b != null) crc.update(b, 0, b.length);
    return (int) (crc.getValue() % 10000L);
  }

  /** One model on one record: features, and for PMML the prediction (others score later). */
  private static Object[] evaluate(int width, String dataType, Route route, Map<String, Object> fields) {
    double[] features = new double[route.inputs.length];
    for (int i = 0; i < features.length; i++) {
      Object v = fields.get(route.normalized[i]);
      if (v == null) {
        return failure(width, dataType, route.key, "validate", "missing field '" + route.inputs[i] + "'");
      }
      if (!(v instanceof Double)) {
        return failure(
            width, dataType, route.key, "validate", "field '" + route.inputs[i] + "' is not a number");
      }
      features[i] = (Double) v;
    }
    if (!"pmml".equals(route.format)) {
      // Scored later, vectorised, by the Python stage for this format.
      return row(width, dataType, route.key, null, null, features, null, null, null, 0L);
    }
    try {
      Pmml model = MODELS.get(route.file);
      if (model == null) {
        if (MODELS.size() >= 8) MODELS.clear(); // swapped-out models: let them be collected
        model = MODELS.computeIfAbsent(route.file, Pmml::load);
      }
      long t0 = System.nanoTime();
      Object[] in = new Object[features.length];
      for (int i = 0; i < in.length; i++) in[i] = features[i];
      Object[] out = model.model.predict((Object) in);
      long nanos = System.nanoTime() - t0;
      return model.result(width, dataType, route.key, out, nanos);
    } catch (Exception e) {
      return failure(width, dataType, route.key, "score", message(e));
    }
  }

  static Object[] row(int width, Object... base) {
    Object[] r = new Object[width];
    System.arraycopy(base, 0, r, 0, base.length);
    return r;
  }

  private static Object[] failure(int width, String dataType, String route, String stage, String error) {
    return row(width, dataType, route, stage, error, null, null, null, null, 0L);
  }

  private static String message(Throwable e) {
    String m = e.getMessage();
    // First line only: Jackson appends source locations that say nothing useful here.
    if (m != null) m = m.split("\n", 2)[0];
    return e.getClass().getSimpleName() + (m == null ? "" : ": " + m);
  }

  /** Lower case, runs of anything but letters and digits become one underscore. */
  public static String normalize(String name) {
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

  // Jackson hands out canonical (interned) field names, so records of one shape hit this cache
  // by identity and are normalised once per JVM, not once per record.
  private static final ThreadLocal<java.util.IdentityHashMap<String, String>> NAMES =
      ThreadLocal.withInitial(java.util.IdentityHashMap::new);

  private static String normalizedName(String name) {
    java.util.IdentityHashMap<String, String> cache = NAMES.get();
    String n = cache.get(name);
    if (n == null) {
      if (cache.size() > 4096) cache.clear(); // records with ever-new keys: stay bounded
      n = normalize(name);
      cache.put(name, n);
    }
    return n;
  }

  /** A JSON object's top-level fields: numbers as Double, strings as String, others by type. */
  static Map<String, Object> decodeJson(byte[] value) throws Exception {
    if (value == null) throw new IllegalArgumentException("record has no value");
    Map<String, Object> out = new HashMap<>(32);
    try (JsonParser p = JSON.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        throw new IllegalArgumentException("record is not a JSON object");
      }
      JsonToken t;
      while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
        String name = normalizedName(p.currentName());
        JsonToken v = p.nextToken();
        switch (v) {
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
            // null and booleans: present, but not usable as a number or a dataType.
            out.put(name, Boolean.FALSE);
        }
      }
      if (t != JsonToken.END_OBJECT) throw new IllegalArgumentException("malformed JSON object");
      if (p.nextToken() != null) throw new IllegalArgumentException("trailing data after JSON");
    }
    return out;
  }

  /** What the driver knows of a PMML model before it is used: checks it and describes it. */
  public static String describe(String path) {
    Pmml m = Pmml.load(path);
    Map<String, Object> d = new LinkedHashMap<>();
    d.put("inputs", m.model.inputNames());
    d.put("outputs", m.model.outputNames());
    d.put("target", m.model.targetName());
    d.put("classification", m.model.isClassification());
    try {
      return MAPPER.writeValueAsString(d);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  static final class Route {
    String key;
    String format;
    String file;
    String[] inputs;
    String[] normalized;
    Route candidate; // during a canary or shadow
    String mode; // a candidate's: "canary" or "shadow"
    int share; // a canary's share of the 10,000 key buckets

    static Route parse(JsonNode r) {
      Route route = new Route();
      route.key = r.get("key").asText();
      route.format = r.get("format").asText();
      route.file = r.path("file").asText(null);
      List<String> inputs = new ArrayList<>();
      for (JsonNode i : r.get("inputs")) inputs.add(i.asText());
      route.inputs = inputs.toArray(new String[0]);
      route.normalized = new String[route.inputs.length];
      for (int i = 0; i < route.inputs.length; i++) {
        route.normalized[i] = normalize(route.inputs[i]);
      }
      route.mode = r.path("mode").asText(null);
      route.share = r.path("share").asInt(0);
      if (r.hasNonNull("candidate")) route.candidate = parse(r.get("candidate"));
      return route;
    }
  }

  static final class Table {
    String dataTypeField; // normalized, as record keys are
    String dataTypeName; // as configured, for messages
    java.util.Set<String> served;
    Map<String, Route> routes = new HashMap<>();
    Protobuf.Field[] protobuf;

    static Table parse(String json) {
      try {
        JsonNode n = MAPPER.readTree(json);
        Table t = new Table();
        t.dataTypeName = n.path("dataTypeField").asText("dataType");
        t.dataTypeField = normalize(t.dataTypeName);
        if (n.hasNonNull("served")) {
          t.served = new java.util.HashSet<>();
          for (JsonNode s : n.get("served")) t.served.add(s.asText());
        }
        Iterator<Map.Entry<String, JsonNode>> it = n.path("routes").fields();
        while (it.hasNext()) {
          Map.Entry<String, JsonNode> e = it.next();
          Route route = Route.parse(e.getValue());
          t.routes.put(e.getKey(), route);
        }
        if (n.hasNonNull("protobuf")) t.protobuf = Protobuf.fields(n.get("protobuf"));
        return t;
      } catch (Exception e) {
        throw new IllegalArgumentException("bad routing table: " + e.getMessage(), e);
      }
    }
  }

  static final class Pmml {
    final Model model;
    final int predicted; // index of the predictedValue output, or -1
    final int[] probability; // indexes of probability(x) outputs
    final String[] probabilityLabel;
    final String[] outputNames;

    Pmml(Model model) {
      this.model = model;
      this.outputNames = model.outputNames();
      int p = -1;
      List<Integer> prob = new ArrayList<>();
      List<String> labels = new ArrayList<>();
      org.pmml4s.metadata.OutputField[] fields = model.outputFields();
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

    static Pmml load(String file) {
      File f = new File(file);
      if (!f.isAbsolute() || !f.exists()) f = new File(SparkFiles.get(file));
      return new Pmml(Model.fromFile(f));
    }

    Object[] result(int width, String dataType, String route, Object[] out, long nanos) {
      Map<String, Double> outputs = new LinkedHashMap<>();
      String label = null;
      for (int i = 0; i < out.length; i++) {
        Object o = out[i];
        if (o instanceof Number) {
          double d = ((Number) o).doubleValue();
          outputs.put(outputNames[i], Double.isNaN(d) ? null : d);
        } else if (o != null && i == predicted) {
          label = o.toString();
        }
      }
      Double prediction = null;
      if (predicted >= 0 && out[predicted] instanceof Number) {
        prediction = ((Number) out[predicted]).doubleValue();
      } else {
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
      if (prediction == null && label == null) {
        return failure(width, dataType, route, "score", "model produced no prediction");
      }
      return row(width, dataType, route, null, null, null, prediction, label, outputs, nanos);
    }
  }
}
