package dev.scorestream.jvm;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The driver's per-batch routing table, as the JVM reads it: which model serves each dataType
 * (and its candidate), how records are decoded, where results go.
 *
 * <p>The Python side writes it from {@code scorestream.api.scoring.RoutingTable}; both shapes are
 * compared field by field by the contract test ({@link #shape()}), and an unknown field is an
 * error here, so neither side can drift without a test failing.
 */
public final class RoutingTable {
  public String dataTypeField = "dataType";
  public List<String> served;
  public Map<String, Route> routes = new HashMap<>();
  public Map<String, List<String>> protobuf;
  public long batchId;
  public String outputTopic;
  public String deadLetterTopic;

  /** One model a dataType's records may meet. */
  public static final class Route {
    public String key; // name:version, how records and statistics name the model
    public String format; // pmml | tensorflow
    public String file;
    public List<String> inputs;
    public Route candidate; // the model on trial next to this one, during a canary or shadow
    public String mode; // a candidate's: canary | shadow
    public int share; // a canary's share of the 10,000 key buckets
  }

  private static final ObjectMapper STRICT =
      new ObjectMapper()
          .enable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
          .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES);

  public static RoutingTable parse(String json) {
    RoutingTable t;
    try {
      t = STRICT.readValue(json, RoutingTable.class);
    } catch (Exception e) {
      throw new IllegalArgumentException("bad routing table: " + e.getMessage(), e);
    }
    if (t.outputTopic == null || t.deadLetterTopic == null) {
      throw new IllegalArgumentException("bad routing table: outputTopic and deadLetterTopic are required");
    }
    for (Map.Entry<String, Route> e : t.routes.entrySet()) check(e.getKey(), e.getValue());
    return t;
  }

  private static void check(String dataType, Route r) {
    if (r.key == null || r.format == null || r.inputs == null) {
      throw new IllegalArgumentException("bad routing table: route of " + dataType + " needs key, format, inputs");
    }
    if (!r.format.equals("pmml") && !r.format.equals("tensorflow")) {
      throw new IllegalArgumentException("bad routing table: unknown format " + r.format);
    }
    if (r.candidate != null) check(dataType, r.candidate);
  }

  /** Field name -> JSON type of this class and of Route: what the contract test compares. */
  public static String shape() {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("RoutingTable", fields(RoutingTable.class));
    out.put("Route", fields(Route.class));
    try {
      return new ObjectMapper().writeValueAsString(out);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  private static Map<String, String> fields(Class<?> c) {
    Map<String, String> out = new LinkedHashMap<>();
    for (Field f : c.getDeclaredFields()) {
      if (Modifier.isStatic(f.getModifiers())) continue;
      out.put(f.getName(), jsonType(f));
    }
    return out;
  }

  private static String jsonType(Field f) {
    Class<?> t = f.getType();
    if (t == String.class) return "string";
    if (t == long.class || t == int.class) return "integer";
    if (t == Route.class) return "Route";
    if (List.class.isAssignableFrom(t)) return "array";
    if (Map.class.isAssignableFrom(t)) {
      String value = ((ParameterizedType) f.getGenericType()).getActualTypeArguments()[1].getTypeName();
      return value.endsWith("Route") ? "object of Route" : "object of array";
    }
    return t.getSimpleName();
  }
}
