package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
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
import org.tensorflow.proto.AttrValue;
import org.tensorflow.proto.GraphDef;
import org.tensorflow.proto.NodeDef;
import org.tensorflow.types.TFloat32;

/**
 * TensorFlowModel on SavedModels and frozen graphs TensorFlow's Java API writes here, checked
 * against the graph's arithmetic done again in float32. (Every wine row against TensorFlow's own
 * Python output: tests/test_tensorflow_jvm.py.)
 */
class TensorFlowModelTest {
  static final float[][] WEIGHTS = {{0.5f, -1.0f, 0.25f, 2.0f}, {1.5f, 0.0f, -0.75f, 0.1f}, {-0.3f, 0.8f, 1.2f, -2.0f}};
  static final double[] ROWS = {7.4, 3.51, 9.4, 1.0, -2.0, 0.5};

  @TempDir Path tmp;

  interface Body {
    Operand<TFloat32> of(Ops tf, Operand<TFloat32> x);
  }

  static Operand<TFloat32> softmax(Ops tf, Operand<TFloat32> x) {
    return tf.nn.softmax(tf.linalg.matMul(x, tf.constant(WEIGHTS)));
  }

  static Operand<TFloat32> firstColumn(Ops tf, Operand<TFloat32> x) {
    float[][] column = new float[WEIGHTS.length][1];
    for (int i = 0; i < WEIGHTS.length; i++) column[i][0] = WEIGHTS[i][0];
    return tf.linalg.matMul(x, tf.constant(column));
  }

  /** softmax(row . WEIGHTS), in float32 as the graph computes it. */
  static float[] softmaxOf(double[] rows, int r) {
    float[] logits = new float[WEIGHTS[0].length];
    for (int j = 0; j < logits.length; j++) {
      for (int i = 0; i < 3; i++) logits[j] += (float) rows[r * 3 + i] * WEIGHTS[i][j];
    }
    float max = Float.NEGATIVE_INFINITY;
    for (float l : logits) max = Math.max(max, l);
    float sum = 0;
    float[] out = new float[logits.length];
    for (int j = 0; j < logits.length; j++) sum += out[j] = (float) Math.exp(logits[j] - max);
    for (int j = 0; j < logits.length; j++) out[j] /= sum;
    return out;
  }

  @Test
  void aSavedModelsClassScoresGiveTheArgmaxAndEveryScoreByIndexForEachRowOfOneCall() throws Exception {
    try (TensorFlowModel model = TensorFlowModel.savedModel(savedModel(TensorFlowModelTest::softmax))) {
      assertEquals(3L, model.width());
      assertEquals("output_0", model.outputName());
      TensorFlowModel.Output out = model.predict(ROWS, 2);
      for (int r = 0; r < 2; r++) {
        float[] want = softmaxOf(ROWS, r);
        int best = 0;
        for (int k = 1; k < want.length; k++) if (want[k] > want[best]) best = k;
        assertEquals(best, out.prediction(r));
        assertEquals(Integer.toString(best), out.label(r));
        Map<String, Double> scores = out.outputs(r);
        assertEquals(List.of("0", "1", "2", "3"), List.copyOf(scores.keySet()));
        for (int k = 0; k < want.length; k++) assertEquals(want[k], scores.get(Integer.toString(k)), 1e-6, "class " + k);
      }
      assertNull(model.check(3));
      assertEquals("model takes 3 inputs but 2 are configured", model.check(2));
    }
  }

  @Test
  void aSingleOutputIsThePredictionUnderItsName() throws Exception {
    try (TensorFlowModel model = TensorFlowModel.savedModel(savedModel(TensorFlowModelTest::firstColumn))) {
      TensorFlowModel.Output out = model.predict(ROWS, 2);
      float want = 1.0f * WEIGHTS[0][0] + -2.0f * WEIGHTS[1][0] + 0.5f * WEIGHTS[2][0];
      assertEquals(want, out.prediction(1), 1e-6);
      assertNull(out.label(1));
      assertEquals(Map.of("output_0", out.prediction(1)), out.outputs(1));
    }
  }

  @Test
  void aFrozenGraphsInputAndOutputAreInferredOrNamedAndItsArchiveLoads() throws Exception {
    byte[] graph = frozen(Shape.of(-1, 3), TensorFlowModelTest::softmax);
    try (TensorFlowModel model = TensorFlowModel.frozenGraph(graph, null, null)) {
      assertEquals("x:0", model.inputName());
      assertEquals(3L, model.width());
      assertArrayEquals(softmaxOf(ROWS, 1), floats(model.predict(ROWS, 2).outputs(1)), 1e-6f);
    }
    Path archive = tmp.resolve("graph.zip");
    try (ZipOutputStream z = new ZipOutputStream(Files.newOutputStream(archive))) {
      z.putNextEntry(new ZipEntry(TensorFlowModel.GRAPH_FILE));
      z.write(graph);
      z.putNextEntry(new ZipEntry(TensorFlowModel.GRAPH_NAMES_FILE));
      z.write("{\"input\": \"x\", \"output\": \"y\"}".getBytes(StandardCharsets.UTF_8));
    }
    try (TensorFlowModel model = TensorFlowModel.load(archive)) {
      assertEquals("y:0", model.outputName());
      assertEquals(4, model.predict(new double[] {0, 0, 0}, 1).outputs(0).size());
    }
    Exception e = assertThrows(IllegalArgumentException.class, () -> TensorFlowModel.frozenGraph(graph, "x", "no-such-op"));
    assertTrue(e.getMessage().contains("no-such-op"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class,
        () -> TensorFlowModel.frozenGraph("not a graph".getBytes(StandardCharsets.UTF_8), null, null));
    assertTrue(e.getMessage().startsWith("frozen graph is not a binary GraphDef"), e.getMessage());
  }

  @Test
  void aGraphWithoutAnInputShapeTakesTheWidthItsOpsImplyOrTheConfiguredOne() throws Exception {
    // No shape attribute at all, as optimize_for_inference writes the Placeholder.
    byte[] graph = withoutInputShape(frozen(Shape.of(-1, 3), TensorFlowModelTest::softmax));
    try (TensorFlowModel model = TensorFlowModel.frozenGraph(graph, null, null)) {
      assertEquals(3L, model.width());
      assertNull(model.check(3));
      assertEquals("model takes 3 inputs but 4 are configured", model.check(4));
    }
    // (None, None): the MatMul's (3, 4) weight says 3.
    try (TensorFlowModel model = TensorFlowModel.frozenGraph(frozen(Shape.of(-1, -1), TensorFlowModelTest::softmax), null, null)) {
      assertEquals(3L, model.width());
    }
    // Nothing says the width: the configured count is proven by a row of zeros.
    byte[] sum = frozen(Shape.unknown(), (tf, x) -> tf.sum(x, tf.constant(1)));
    try (TensorFlowModel model = TensorFlowModel.frozenGraph(sum, null, null)) {
      assertNull(model.width());
      assertNull(model.check(5));
      assertEquals(5.0, model.predict(new double[] {1, 1, 1, 1, 1}, 1).prediction(0));
    }
    // What cannot be fed (rows, n): refused on loading, or by the row of zeros.
    Exception e = assertThrows(IllegalArgumentException.class,
        () -> TensorFlowModel.frozenGraph(frozen(Shape.of(-1, 3, 3), (tf, x) -> tf.identity(x)), null, null));
    assertTrue(e.getMessage().endsWith("has shape (None, 3, 3); (None, n) is supported"), e.getMessage());
    try (TensorFlowModel det = TensorFlowModel.frozenGraph(frozen(Shape.unknown(), (tf, x) -> tf.linalg.det(x)), null, null)) {
      String why = det.check(4);
      assertTrue(why.startsWith("model cannot be fed 4 inputs: InvalidArgumentError"), why);
    }
    // Ops that disagree on the width: no guess.
    float[][] four = {{1}, {2}, {3}, {4}};
    e = assertThrows(IllegalArgumentException.class, () -> TensorFlowModel.frozenGraph(frozen(Shape.unknown(),
        (tf, x) -> tf.math.add(tf.linalg.matMul(x, tf.constant(WEIGHTS)), tf.linalg.matMul(x, tf.constant(four)))),
        null, null));
    assertTrue(e.getMessage().endsWith("the ops reading it take [3, 4] features"), e.getMessage());
  }

  @Test
  void tensorFlowsStatusesAreNamedAsItsPythonNamesThem() {
    assertEquals("InvalidArgumentError: bad\nnews".split("\n")[0],
        TensorFlowModel.describe(new org.tensorflow.exceptions.TFInvalidArgumentException("bad\nnews")));
    assertEquals("IllegalStateException", TensorFlowModel.describe(new IllegalStateException()));
  }

  static float[] floats(Map<String, Double> outputs) {
    float[] f = new float[outputs.size()];
    int i = 0;
    for (double v : outputs.values()) f[i++] = (float) v;
    return f;
  }

  /** A GraphDef of `body` over a float Placeholder `x` of `shape`, its result `y`. */
  static byte[] frozen(Shape shape, Body body) {
    try (Graph g = new Graph()) {
      Ops tf = Ops.create(g);
      Placeholder<TFloat32> x = tf.withName("x").placeholder(TFloat32.class, Placeholder.shape(shape));
      tf.withName("y").identity(body.of(tf, x));
      return g.toGraphDef().toByteArray();
    }
  }

  static byte[] withoutInputShape(byte[] graph) throws IOException {
    GraphDef g = GraphDef.parseFrom(graph);
    GraphDef.Builder b = g.toBuilder();
    for (int i = 0; i < g.getNodeCount(); i++) {
      NodeDef n = g.getNode(i);
      if (n.getOp().equals("Placeholder")) {
        b.setNode(i, n.toBuilder().clearAttr().putAttr("dtype", n.getAttrOrDefault("dtype", AttrValue.getDefaultInstance())));
      }
    }
    return b.build().toByteArray();
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
}
