package dev.scorestream.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Map;

/**
 * A JSON record's fields as models read them: names normalised (lower case, other runs -> '_'),
 * numbers as Double. Needs nothing of Spark, so the benchmark's Kafka Streams peer parses records
 * with this very code.
 */
public final class RecordFields {
  private RecordFields() {}

  // Parsing the records' numbers is a large share of the scorer's work: Jackson's fast double
  // parser (FastDoubleParser) gives the same doubles as Double.parseDouble in less time.
  private static final JsonFactory JSON =
      JsonFactory.builder().enable(StreamReadFeature.USE_FAST_DOUBLE_PARSER).build();

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
  private static final ThreadLocal<IdentityHashMap<String, String>> NAMES =
      ThreadLocal.withInitial(IdentityHashMap::new);

  private static String normalizedName(IdentityHashMap<String, String> cache, String name) {
    String n = cache.get(name);
    if (n == null) {
      if (cache.size() > 4096) cache.clear(); // records with ever-new keys: stay bounded
      n = normalize(name);
      cache.put(name, n);
    }
    return n;
  }

  /**
   * A number a double cannot hold (1e400 overflows to Infinity) is not a usable feature: a model
   * would score it without complaint, so it is refused as not a number, as NaN is by the parser.
   */
  static Object finite(double d) {
    return Double.isFinite(d) ? (Object) d : Boolean.FALSE;
  }

  /** A JSON object's top-level fields: numbers as Double, strings as String, others by type. */
  public static Map<String, Object> decodeJson(byte[] value) throws Exception {
    if (value == null) throw new IllegalArgumentException("record has no value");
    Map<String, Object> out = new HashMap<>(32);
    // Once per record, not per field: a Spark task thread's ThreadLocalMap is crowded, and a
    // lookup there that misses its first slot showed as 1.6% of the task threads' samples.
    IdentityHashMap<String, String> names = NAMES.get();
    try (JsonParser p = JSON.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        throw new IllegalArgumentException("record is not a JSON object");
      }
      JsonToken t;
      while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
        String name = normalizedName(names, p.currentName());
        JsonToken v = p.nextToken();
        switch (v) {
          case VALUE_NUMBER_INT:
          case VALUE_NUMBER_FLOAT:
            out.put(name, finite(p.getDoubleValue()));
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

}
