package dev.scorestream.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.scorestream.jvm.RecordFields;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipOutputStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.tensorflow.Graph;
import org.tensorflow.Operand;
import org.tensorflow.SavedModelBundle;
import org.tensorflow.Session;
import org.tensorflow.SessionFunction;
import org.tensorflow.Signature;
import org.tensorflow.ndarray.Shape;
import org.tensorflow.op.Ops;
import org.tensorflow.op.core.Placeholder;
import org.tensorflow.types.TFloat32;

/**
 * TensorFlowModel on SavedModels that TensorFlow's Java API exports here: a descriptor as
 * scorestream publishes it in, scorestream's output record out, with the values the graph's
 * arithmetic gives (computed again here in float32).
 */
class TensorFlowModelTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  static final float[][] WEIGHTS = {{0.5f, -1.0f, 0.25f, 2.0f}, {1.5f, 0.0f, -0.75f, 0.1f}, {-0.3f, 0.8f, 1.2f, -2.0f}};
  static final List<String> FIELDS = List.of("fixed acidity", "pH", "alcohol");
  static final String RECORD = "{\"dataType\": \"wine\", \"fixed acidity\": 7.4, \"pH\": 3.51, \"alcohol\": 9.4}";

  @TempDir Path tmp;

  @Test
  void classScoresGiveTheArgmaxAndEveryScoreByClassIndex() throws Exception {
    TensorFlowModel model = TensorFlowModel.fromDescriptor(descriptor(savedModel(this::softmax), FIELDS));
    JsonNode out = score(model, RECORD);

    float[] want = softmaxOf(new float[] {7.4f, 3.51f, 9.4f});
    int best = 0;
    for (int k = 1; k < want.length; k++) if (want[k] > want[best]) best = k;
    assertEquals(best, out.get("prediction").asDouble());
    assertEquals(Integer.toString(best), out.get("label").asText());
    JsonNode scores = out.get("outputs");
    assertEquals(List.of("0", "1", "2", "3"), names(scores));
    for (int i = 0; i < want.length; i++) {
      assertEquals(want[i], scores.get(Integer.toString(i)).asDouble(), 1e-6 * want[i], "class " + i);
    }
    assertEquals("keras", out.at("/model/name").asText());
    assertEquals("1", out.at("/model/version").asText());
    assertEquals("wine", out.get("dataType").asText());
    assertEquals("k-1", out.get("key").asText());
    assertEquals(17, out.at("/source/offset").asLong());
  }

  @Test
  void aSingleOutputIsThePredictionUnderItsName() throws Exception {
    TensorFlowModel model = TensorFlowModel.fromDescriptor(descriptor(savedModel(this::firstColumn), FIELDS));
    JsonNode out = score(model, RECORD);

    float want = 7.4f * WEIGHTS[0][0] + 3.51f * WEIGHTS[1][0] + 9.4f * WEIGHTS[2][0];
    assertEquals(want, out.get("prediction").asDouble(), 1e-6 * Math.abs(want));
    assertFalse(out.has("label"));
    assertEquals(List.of("output_0"), names(out.get("outputs")));
  }

  @Test
  void theDescriptorsFieldOrderIsTheInputOrder() throws Exception {
    TensorFlowModel model = TensorFlowModel.fromDescriptor(
        descriptor(savedModel(this::firstColumn), List.of("alcohol", "pH", "fixed acidity")));
    float want = 9.4f * WEIGHTS[0][0] + 3.51f * WEIGHTS[1][0] + 7.4f * WEIGHTS[2][0];
    assertEquals(want, score(model, RECORD).get("prediction").asDouble(), 1e-6 * Math.abs(want));
  }

  @Test
  void aRecordWithoutAnInputFieldIsRefusedNamingIt() throws Exception {
    TensorFlowModel model = TensorFlowModel.fromDescriptor(descriptor(savedModel(this::softmax), FIELDS));
    Exception e = assertThrows(IllegalArgumentException.class,
        () -> score(model, "{\"dataType\": \"wine\", \"fixed acidity\": 7.4, \"alcohol\": 9.4}"));
    assertTrue(e.getMessage().contains("'pH' is missing"), e.getMessage());
  }

  @Test
  void aModelOfAnotherWidthIsRefused() throws Exception {
    ObjectNode d = descriptor(savedModel(this::softmax), List.of("fixed acidity", "pH"));
    Exception e = assertThrows(IllegalArgumentException.class, () -> TensorFlowModel.fromDescriptor(d));
    assertEquals("model takes 3 inputs but 2 are configured", e.getMessage());
  }

  @Test
  void theDescriptorsFormatPicksTheModel() throws Exception {
    ObjectNode d = descriptor(savedModel(this::softmax), FIELDS);
    assertTrue(ScoringModel.fromDescriptor(d.toString()) instanceof TensorFlowModel);
    d.put("format", "onnx");
    Exception e = assertThrows(IllegalArgumentException.class, () -> ScoringModel.fromDescriptor(d.toString()));
    assertEquals("format 'onnx' is not served by this peer", e.getMessage());
  }

  Operand<TFloat32> softmax(Ops tf, Operand<TFloat32> x) {
    return tf.nn.softmax(tf.linalg.matMul(x, tf.constant(WEIGHTS)));
  }

  Operand<TFloat32> firstColumn(Ops tf, Operand<TFloat32> x) {
    float[][] column = new float[WEIGHTS.length][1];
    for (int i = 0; i < WEIGHTS.length; i++) column[i][0] = WEIGHTS[i][0];
    return tf.linalg.matMul(x, tf.constant(column));
  }

  /** softmax(row . WEIGHTS), in float32 as the graph computes it. */
  static float[] softmaxOf(float[] row) {
    float[] logits = new float[WEIGHTS[0].length];
    for (int j = 0; j < logits.length; j++) {
      for (int i = 0; i < row.length; i++) logits[j] += row[i] * WEIGHTS[i][j];
    }
    float max = Float.NEGATIVE_INFINITY;
    for (float l : logits) max = Math.max(max, l);
    float sum = 0;
    float[] out = new float[logits.length];
    for (int j = 0; j < logits.length; j++) sum += out[j] = (float) Math.exp(logits[j] - max);
    for (int j = 0; j < logits.length; j++) out[j] /= sum;
    return out;
  }

  interface Body {
    Operand<TFloat32> of(Ops tf, Operand<TFloat32> x);
  }

  /** A SavedModel of `body` over a (None, 3) float input, signature serving_default, zipped. */
  byte[] savedModel(Body body) throws IOException {
    Path dir = Files.createTempDirectory(tmp, "saved");
    try (Graph g = new Graph(); Session s = new Session(g)) {
      Ops tf = Ops.create(g);
      Placeholder<TFloat32> x = tf.withName("features").placeholder(TFloat32.class, Placeholder.shape(Shape.of(-1, 3)));
      Signature signature = Signature.builder("serving_default").input("keras_tensor", x)
          .output("output_0", body.of(tf, x)).build();
      SavedModelBundle.exporter(dir.toString()).withFunction(SessionFunction.create(signature, s)).export();
    }
    return zip(dir);
  }

  static byte[] zip(Path dir) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ZipOutputStream z = new ZipOutputStream(bytes); Stream<Path> files = Files.walk(dir)) {
      for (Path f : (Iterable<Path>) files.filter(Files::isRegularFile).sorted()::iterator) {
        z.putNextEntry(new ZipEntry(dir.relativize(f).toString()));
        Files.copy(f, z);
        z.closeEntry();
      }
    }
    return bytes.toByteArray();
  }

  /** As scorestream.api.descriptor.ModelDescriptor.to_json_bytes writes one. */
  static ObjectNode descriptor(byte[] archive, List<String> inputs) {
    ObjectNode d = JSON.createObjectNode();
    d.put("name", "keras").put("version", "1").put("dataType", "wine").put("format", "tensorflow");
    inputs.forEach(d.putArray("inputs")::add);
    d.put("data", Base64.getEncoder().encodeToString(archive));
    return d;
  }

  static JsonNode score(ScoringModel model, String record) throws Exception {
    Map<String, Object> fields = RecordFields.decodeJson(record.getBytes(StandardCharsets.UTF_8));
    byte[] out = model.score(fields, "k-1".getBytes(StandardCharsets.UTF_8), "in", 0, 17, 0L);
    return JSON.readTree(out);
  }

  static List<String> names(JsonNode object) {
    List<String> out = new ArrayList<>();
    object.fieldNames().forEachRemaining(out::add);
    return out;
  }
}
