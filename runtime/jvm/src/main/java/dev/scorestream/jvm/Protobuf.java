package dev.scorestream.jvm;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Decodes flat protobuf messages (scalar fields only) by a field table the driver derives from a
 * descriptor. Spark's own from_protobuf lives in an external jar this image need not carry; the
 * records scored here are flat feature vectors, so a wire-format reader of a few dozen lines is
 * all that is needed.
 */
final class Protobuf {
  private Protobuf() {}

  static final class Field {
    final String name; // normalized
    final String type;

    Field(String name, String type) {
      this.name = name;
      this.type = type;
    }
  }

  /** {"1": ["fixed_acidity", "double"], ...} to an array indexed by field number. */
  static Field[] fields(Map<String, List<String>> table) {
    int max = 0;
    for (String number : table.keySet()) max = Math.max(max, Integer.parseInt(number));
    Field[] out = new Field[max + 1];
    for (Map.Entry<String, List<String>> e : table.entrySet()) {
      out[Integer.parseInt(e.getKey())] =
          new Field(RecordFields.normalize(e.getValue().get(0)), e.getValue().get(1));
    }
    return out;
  }

  static Map<String, Object> decode(byte[] b, Field[] fields) {
    if (b == null) throw new IllegalArgumentException("record has no value");
    Map<String, Object> out = new HashMap<>(32);
    // proto3 does not send fields holding their default: an absent number is 0, not missing.
    for (Field f : fields) {
      if (f != null && !f.type.equals("string") && !f.type.equals("bytes") && !f.type.equals("bool")) {
        out.put(f.name, 0.0);
      }
    }
    int[] pos = {0};
    while (pos[0] < b.length) {
      long tag = varint(b, pos);
      int number = (int) (tag >>> 3);
      int wire = (int) (tag & 7);
      if (number <= 0) throw new IllegalArgumentException("invalid protobuf tag at " + pos[0]);
      Field f = number < fields.length ? fields[number] : null;
      switch (wire) {
        case 0: {
          long v = varint(b, pos);
          if (f != null) out.put(f.name, varintValue(v, f.type));
          break;
        }
        case 1: {
          long v = fixed(b, pos, 8);
          if (f != null) {
            out.put(
                f.name, f.type.equals("double") ? RecordFields.finite(Double.longBitsToDouble(v)) : (double) v);
          }
          break;
        }
        case 5: {
          long v = fixed(b, pos, 4);
          if (f != null) {
            out.put(
                f.name,
                f.type.equals("float") ? RecordFields.finite(Float.intBitsToFloat((int) v)) : (double) (int) v);
          }
          break;
        }
        case 2: {
          // Compared as a long, before any cast: a length past 2^31 must not wrap into range.
          long declared = varint(b, pos);
          if (declared < 0 || declared > b.length - pos[0]) {
            throw new IllegalArgumentException("truncated protobuf field " + number);
          }
          int len = (int) declared;
          if (f != null) {
            out.put(
                f.name,
                f.type.equals("string")
                    ? new String(b, pos[0], len, StandardCharsets.UTF_8)
                    : Boolean.FALSE);
          }
          pos[0] += len;
          break;
        }
        default:
          throw new IllegalArgumentException("unsupported protobuf wire type " + wire);
      }
    }
    return out;
  }

  private static Object varintValue(long v, String type) {
    switch (type) {
      case "sint32":
      case "sint64":
        return (double) ((v >>> 1) ^ -(v & 1));
      case "int32":
        return (double) (int) v;
      case "uint64":
      case "uint32":
      case "int64":
      case "enum":
        return (double) v;
      default:
        return Boolean.FALSE; // bool or a mismatched type: not a number
    }
  }

  private static long varint(byte[] b, int[] pos) {
    long result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos[0] >= b.length) throw new IllegalArgumentException("truncated protobuf varint");
      byte x = b[pos[0]++];
      result |= (long) (x & 0x7f) << shift;
      if ((x & 0x80) == 0) return result;
    }
    throw new IllegalArgumentException("malformed protobuf varint");
  }

  private static long fixed(byte[] b, int[] pos, int n) {
    if (pos[0] + n > b.length) throw new IllegalArgumentException("truncated protobuf field");
    long v = 0;
    for (int i = 0; i < n; i++) v |= (b[pos[0] + i] & 0xffL) << (8 * i);
    pos[0] += n;
    return v;
  }
}
