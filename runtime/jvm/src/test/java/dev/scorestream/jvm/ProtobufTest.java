package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class ProtobufTest {
  private static final Protobuf.Field[] FIELDS = Protobuf.fields(Map.of(
      "1", List.of("Fixed Acidity", "double"),
      "2", List.of("count", "int32"),
      "3", List.of("delta", "sint64"),
      "4", List.of("ratio", "float"),
      "5", List.of("dataType", "string"),
      "6", List.of("flag", "bool"),
      "9", List.of("big", "uint64")));

  /** The wire format, written out by hand so that the test does not share the decoder's code. */
  private static final class Wire {
    final ByteArrayOutputStream out = new ByteArrayOutputStream();

    Wire varint(long v) {
      while ((v & ~0x7fL) != 0) {
        out.write((int) ((v & 0x7f) | 0x80));
        v >>>= 7;
      }
      out.write((int) v);
      return this;
    }

    Wire tag(int number, int wire) {
      return varint(((long) number << 3) | wire);
    }

    Wire fixed(long v, int n) {
      for (int i = 0; i < n; i++) out.write((int) (v >>> (8 * i)) & 0xff);
      return this;
    }

    Wire bytes(byte[] b) {
      varint(b.length);
      out.write(b, 0, b.length);
      return this;
    }

    byte[] done() {
      return out.toByteArray();
    }
  }

  @Test
  void decodesScalarsByTheirDeclaredTypes() {
    byte[] msg = new Wire()
        .tag(1, 1).fixed(Double.doubleToLongBits(7.4), 8)
        .tag(2, 0).varint(-3L) // int32 negatives are sent as 10-byte varints
        .tag(3, 0).varint(((-5L) << 1) ^ (-5L >> 63)) // zigzag
        .tag(4, 5).fixed(Float.floatToIntBits(0.5f), 4)
        .tag(5, 2).bytes("red".getBytes(StandardCharsets.UTF_8))
        .tag(9, 0).varint(1L << 40)
        .done();
    Map<String, Object> out = Protobuf.decode(msg, FIELDS);
    assertEquals(7.4, out.get("fixed_acidity"));
    assertEquals(-3.0, out.get("count"));
    assertEquals(-5.0, out.get("delta"));
    assertEquals(0.5, out.get("ratio"));
    assertEquals("red", out.get("datatype"));
    assertEquals((double) (1L << 40), out.get("big"));
  }

  @Test
  void absentNumbersAreZeroAsProto3SendsNoDefaults() {
    Map<String, Object> out = Protobuf.decode(new byte[0], FIELDS);
    assertEquals(0.0, out.get("fixed_acidity"));
    assertEquals(0.0, out.get("count"));
    assertTrue(!out.containsKey("datatype") && !out.containsKey("flag"));
  }

  @Test
  void unknownFieldsAreSkipped() {
    byte[] msg = new Wire()
        .tag(20, 2).bytes(new byte[] {1, 2, 3})
        .tag(21, 0).varint(300)
        .tag(22, 5).fixed(1, 4)
        .tag(2, 0).varint(8)
        .done();
    Map<String, Object> out = Protobuf.decode(msg, FIELDS);
    assertEquals(8.0, out.get("count"));
    assertEquals(5, out.size()); // the five numbers declared, nothing of the unknown fields
  }

  @Test
  void notANumberWhereANumberIsDeclared() {
    assertEquals(Boolean.FALSE, Protobuf.decode(new Wire().tag(6, 0).varint(1).done(), FIELDS).get("flag"));
    assertEquals(Boolean.FALSE, Protobuf.decode(new Wire().tag(1, 2).bytes(new byte[2]).done(), FIELDS).get("fixed_acidity"));
    byte[] infinite = new Wire().tag(1, 1).fixed(Double.doubleToLongBits(Double.POSITIVE_INFINITY), 8).done();
    assertEquals(Boolean.FALSE, Protobuf.decode(infinite, FIELDS).get("fixed_acidity"));
  }

  @Test
  void malformedMessagesAreRefused() {
    assertThrows(IllegalArgumentException.class, () -> Protobuf.decode(null, FIELDS));
    assertThrows(IllegalArgumentException.class, () -> Protobuf.decode(new byte[] {(byte) 0x08, (byte) 0x80}, FIELDS));
    assertThrows(IllegalArgumentException.class, () -> Protobuf.decode(new Wire().tag(1, 1).fixed(0, 4).done(), FIELDS));
    assertThrows(IllegalArgumentException.class, () -> Protobuf.decode(new Wire().tag(2, 3).done(), FIELDS));
    assertThrows(IllegalArgumentException.class, () -> Protobuf.decode(new Wire().tag(0, 0).varint(1).done(), FIELDS));
    byte[] tenBytesOfContinuation = new byte[11];
    tenBytesOfContinuation[0] = 0x08;
    for (int i = 1; i < 11; i++) tenBytesOfContinuation[i] = (byte) 0x80;
    assertThrows(IllegalArgumentException.class, () -> Protobuf.decode(tenBytesOfContinuation, FIELDS));
  }

  @Test
  void aLengthPastTheMessageDoesNotWrap() {
    // 2^32 + 1 as a length: cast to int first it would read as 1 and pass.
    byte[] msg = new Wire().tag(5, 2).varint((1L << 32) + 1).fixed(0, 2).done();
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Protobuf.decode(msg, FIELDS));
    assertTrue(e.getMessage().contains("truncated"), e.getMessage());
  }
}
