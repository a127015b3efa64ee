package dev.scorestream.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;
import java.util.zip.ZipInputStream;
import org.tensorflow.Graph;
import org.tensorflow.GraphOperation;
import org.tensorflow.Result;
import org.tensorflow.SavedModelBundle;
import org.tensorflow.Session;
import org.tensorflow.Signature;
import org.tensorflow.Tensor;
import org.tensorflow.exceptions.TensorFlowException;
import org.tensorflow.ndarray.Shape;
import org.tensorflow.ndarray.buffer.DataBuffers;
import org.tensorflow.proto.ConfigProto;
import org.tensorflow.proto.DataType;
import org.tensorflow.proto.GraphDef;
import org.tensorflow.types.TFloat32;
import org.tensorflow.types.TFloat64;

/**
 * A TensorFlow model in this JVM (TensorFlow's Java API): a SavedModel or a frozen GraphDef, called
 * with one dense (rows, n) input and read from one output, as many rows a call as the caller has.
 *
 * <p>A SavedModel serves its signature {@code serving_default}, else {@code predict}, else the first
 * by name: its one (None, n) input, its first output by name. A frozen graph serves the input and
 * output its descriptor names, else its one Placeholder and its one sink ({@link FrozenGraphs}).
 * An output of one value a row is the prediction, under the output's name; class scores give the
 * argmax as prediction and label and every score under its class index ({@link Output}).
 *
 * <p>One session per model, shared by the JVM's task threads: TensorFlow runs a call in the
 * caller's thread, one op at a time (Spark already runs a task per core).
 */
public final class TensorFlowModel implements AutoCloseable {
  static final String TAG = "serve";
  /** In a job's archive of a frozen graph: the GraphDef, and its tensor names (TensorFlowGraph). */
  public static final String GRAPH_FILE = "frozen_graph.pb";
  public static final String GRAPH_NAMES_FILE = "graph.json";
  private static final List<String> PREFERRED_SIGNATURES = List.of("serving_default", "predict");
  private static final String[] CLASS_KEYS = new String[256]; // "0", "1", ...: not made per record
  private static final ObjectMapper JSON = new ObjectMapper();

  static {
    for (int i = 0; i < CLASS_KEYS.length; i++) CLASS_KEYS[i] = Integer.toString(i);
  }

  private final AutoCloseable owner; // the bundle, or the graph and its session
  private final Session session;
  private final String feed; // tensor names, op:index
  private final String fetch;
  private final String outputName; // what a one-value output is called in a record's outputs
  private final Long width; // features a row, null: nothing in the model says
  private final boolean doubles; // the input is float64, else float32

  private TensorFlowModel(AutoCloseable owner, Session session, String feed, String fetch, String outputName, Long width,
      DataType input) {
    this.owner = owner;
    this.session = session;
    this.feed = feed;
    this.fetch = fetch;
    this.outputName = outputName;
    this.width = width;
    if (input != DataType.DT_FLOAT && input != DataType.DT_DOUBLE) {
      throw new IllegalArgumentException("input '" + feed + "' is " + input + "; float32 or float64 is supported");
    }
    this.doubles = input == DataType.DT_DOUBLE;
  }

  /**
   * One thread for TensorFlow's op pool, and calls run in the caller's thread: each Spark task's
   * call runs its small graph on its own, instead of handing ops to a pool the other tasks compete
   * for (benchmarks/tf_costs.py).
   */
  static ConfigProto sessionConfig() {
    return ConfigProto.newBuilder().setIntraOpParallelismThreads(1).setInterOpParallelismThreads(-1).build();
  }

  /** The input tensor's name: what the model is fed. */
  public String inputName() {
    return feed;
  }

  /** The output's name: a one-value prediction's key in a record's outputs. */
  public String outputName() {
    return outputName;
  }

  /** How many features a row the model takes; null when nothing in it says. */
  public Long width() {
    return width;
  }

  /**
   * The model in a job's archive (a zip): a SavedModel's folder, or a frozen graph with its names
   * ({@link #GRAPH_FILE}, {@link #GRAPH_NAMES_FILE}).
   */
  public static TensorFlowModel load(Path archive) throws IOException {
    try (ZipFile zip = new ZipFile(archive.toFile())) {
      ZipEntry graph = zip.getEntry(GRAPH_FILE);
      if (graph == null) return savedModel(Files.readAllBytes(archive));
      JsonNode names = JSON.readTree(zip.getInputStream(zip.getEntry(GRAPH_NAMES_FILE)).readAllBytes());
      return frozenGraph(zip.getInputStream(graph).readAllBytes(), text(names, "input"), text(names, "output"));
    }
  }

  private static String text(JsonNode names, String field) {
    JsonNode v = names.get(field);
    return v == null || v.isNull() ? null : v.asText();
  }

  /** A zipped SavedModel: unpacked into a temporary folder, loaded, and the folder removed. */
  public static TensorFlowModel savedModel(byte[] zip) throws IOException {
    Path dir = Files.createTempDirectory("scorestream-tf-");
    try {
      unzip(zip, dir);
      SavedModelBundle bundle = SavedModelBundle.loader(savedModelFolder(dir).toString()).withTags(TAG)
          .withConfigProto(sessionConfig()).load();
      try {
        return fromBundle(bundle);
      } catch (RuntimeException e) {
        bundle.close();
        throw e;
      }
    } finally {
      deleteTree(dir);
    }
  }

  private static TensorFlowModel fromBundle(SavedModelBundle bundle) {
    Signature signature = bundle.function(signatureKey(bundle)).signature();
    Map<String, Signature.TensorDescription> in = signature.getInputs();
    if (in.size() != 1) {
      throw new IllegalArgumentException("signature '" + signature.key() + "' has " + in.size()
          + " inputs; one dense (None, n) input is supported");
    }
    Map.Entry<String, Signature.TensorDescription> input = in.entrySet().iterator().next();
    Shape shape = input.getValue().shape;
    if (shape.isUnknown() || shape.numDimensions() != 2 || shape.get(1) < 0) {
      throw new IllegalArgumentException("signature '" + signature.key() + "' input '" + input.getKey()
          + "' has shape " + pythonShape(shape) + "; (None, n) is supported");
    }
    String output = signature.outputNames().stream().sorted().findFirst()
        .orElseThrow(() -> new IllegalArgumentException("signature '" + signature.key() + "' has no outputs"));
    return new TensorFlowModel(bundle, bundle.session(), input.getValue().name,
        signature.getOutputs().get(output).name, output, shape.get(1), input.getValue().dataType);
  }

  /**
   * A frozen GraphDef, imported once, fed at {@code input} and read at {@code output} (null: the
   * one Placeholder, the one sink). An input without a width is given the one its ops imply.
   */
  public static TensorFlowModel frozenGraph(byte[] graphDef, String input, String output) {
    GraphDef parsed;
    try {
      parsed = GraphDef.parseFrom(graphDef);
    } catch (com.google.protobuf.InvalidProtocolBufferException e) {
      throw new IllegalArgumentException("frozen graph is not a binary GraphDef: " + e.getMessage(), e);
    }
    if (parsed.getNodeCount() == 0) throw new IllegalArgumentException("frozen graph has no ops");
    String[] names = FrozenGraphs.names(parsed, input, output);
    parsed = FrozenGraphs.withInputShape(parsed, names[0]);
    Graph graph = new Graph();
    try {
      graph.importGraphDef(parsed);
      Shape shape = outputShape(graph, names[0]);
      outputShape(graph, names[1]);
      if (!shape.isUnknown() && shape.numDimensions() != 2) {
        throw new IllegalArgumentException("frozen graph input '" + names[0] + "' has shape " + pythonShape(shape)
            + "; (None, n) is supported");
      }
      Long width = shape.isUnknown() || shape.get(1) < 0 ? null : shape.get(1);
      DataType type = graph.operation(names[0].split(":")[0]).output(index(names[0])).dataType();
      Session session = new Session(graph, sessionConfig());
      AutoCloseable owner = () -> {
        session.close();
        graph.close();
      };
      return new TensorFlowModel(owner, session, names[0], names[1], names[1], width, type);
    } catch (RuntimeException e) {
      graph.close();
      throw e;
    }
  }

  private static int index(String tensor) {
    return Integer.parseInt(tensor.substring(tensor.indexOf(':') + 1));
  }

  private static Shape outputShape(Graph graph, String tensor) {
    GraphOperation op = graph.operation(tensor.split(":")[0]);
    int i = index(tensor);
    if (op == null || i >= op.numOutputs()) {
      throw new IllegalArgumentException("frozen graph: the name '" + tensor + "' refers to a Tensor which does not "
          + "exist. The operation, '" + tensor.split(":")[0] + "', does not exist in the graph.");
    }
    return op.output(i).shape();
  }

  /** A shape as TensorFlow's Python writes one: (None, 3, 3). */
  static String pythonShape(Shape shape) {
    if (shape.isUnknown()) return "<unknown>";
    List<String> dims = new ArrayList<>();
    for (long d : shape.asArray()) dims.add(d < 0 ? "None" : Long.toString(d));
    return "(" + String.join(", ", dims) + (dims.size() == 1 ? ",)" : ")");
  }

  /** The model's output for {@code rows} rows of {@code features} (row after row). */
  public Output predict(double[] features, int rows) {
    int n = rows == 0 ? 0 : features.length / rows;
    try (Tensor x = input(features, rows, n); Result result = session.runner().feed(feed, x).fetch(fetch).run()) {
      Tensor y = result.get(0);
      Shape shape = y.shape();
      if (shape.numDimensions() == 0 || shape.get(0) != rows) {
        throw new IllegalStateException("model returned " + (shape.numDimensions() == 0 ? 0 : shape.get(0))
            + " rows for " + rows);
      }
      double[] values = new double[(int) shape.size()];
      if (y instanceof TFloat32) {
        float[] f = new float[values.length];
        ((TFloat32) y).copyTo(DataBuffers.of(f, false, false));
        for (int i = 0; i < f.length; i++) values[i] = f[i];
      } else if (y instanceof TFloat64) {
        ((TFloat64) y).copyTo(DataBuffers.of(values, false, false));
      } else {
        throw new IllegalStateException("output '" + fetch + "' is " + y.dataType() + "; float32 or float64 is read");
      }
      int perRow = rows == 0 ? 0 : values.length / rows;
      // As the Python reference reads a batch: (rows,) or (rows, 1) is one value a row.
      return new Output(values, perRow, perRow == 1, outputName);
    }
  }

  private Tensor input(double[] features, int rows, int n) {
    Shape shape = Shape.of(rows, n);
    if (doubles) return TFloat64.tensorOf(shape, DataBuffers.of(features, true, false));
    float[] f = new float[features.length];
    for (int i = 0; i < f.length; i++) f[i] = (float) features[i];
    return TFloat32.tensorOf(shape, DataBuffers.of(f, true, false));
  }

  /**
   * Why the model cannot be fed {@code n} features, or null: its width against the count, and a
   * row of zeros scored (which proves a graph whose width nothing declares).
   */
  public String check(int n) {
    if (width != null && width != n) return "model takes " + width + " inputs but " + n + " are configured";
    try {
      predict(new double[n], 1);
    } catch (RuntimeException e) { // TensorFlow's status of the call: the width does not fit the graph
      return "model cannot be fed " + n + " inputs: " + describe(e);
    }
    return null;
  }

  /**
   * An exception as its first line, TensorFlow's statuses named as TensorFlow's Python names them
   * (TFInvalidArgumentException: InvalidArgumentError), so a reason reads the same from both.
   */
  public static String describe(Throwable e) {
    String type = e.getClass().getSimpleName();
    boolean status = e.getClass().getPackageName().equals(TensorFlowException.class.getPackageName());
    if (status && type.startsWith("TF") && type.endsWith("Exception")) {
      type = type.substring(2, type.length() - "Exception".length()) + "Error";
    }
    String m = e.getMessage();
    if (m == null || m.isBlank()) return type;
    String first = m.strip().split("\n", 2)[0];
    return type + ": " + (first.length() > 300 ? first.substring(0, 300) : first);
  }

  @Override
  public void close() throws Exception {
    owner.close();
  }

  /** A call's output: {@code perRow} values for each row. */
  public static final class Output {
    private final double[] values;
    private final int perRow;
    private final boolean oneValue;
    private final String name;

    Output(double[] values, int perRow, boolean oneValue, String name) {
      this.values = values;
      this.perRow = perRow;
      this.oneValue = oneValue;
      this.name = name;
    }

    /** The prediction of row {@code i}: its one value, or its highest score's class index. */
    public double prediction(int i) {
      return oneValue ? values[i] : argmax(i);
    }

    /** The class of row {@code i} (its highest score's index), null for a one-value output. */
    public String label(int i) {
      return oneValue ? null : classKey(argmax(i));
    }

    /** Row {@code i}'s values by name: the output's name, or each class index. */
    public Map<String, Double> outputs(int i) {
      if (oneValue) return Map.of(name, values[i]);
      Map<String, Double> out = new LinkedHashMap<>(perRow * 2);
      for (int k = 0; k < perRow; k++) out.put(classKey(k), values[i * perRow + k]);
      return out;
    }

    /** The first of the highest scores, as numpy's argmax picks. */
    private int argmax(int i) {
      int base = i * perRow, best = 0;
      for (int k = 1; k < perRow; k++) if (values[base + k] > values[base + best]) best = k;
      return best;
    }
  }

  static String classKey(int i) {
    return i < CLASS_KEYS.length ? CLASS_KEYS[i] : Integer.toString(i);
  }

  private static void unzip(byte[] archive, Path dir) throws IOException {
    try (ZipInputStream zip = new ZipInputStream(new ByteArrayInputStream(archive))) {
      for (ZipEntry e; (e = zip.getNextEntry()) != null; ) {
        Path target = dir.resolve(e.getName()).normalize();
        // The archive may come off the models topic: none of its names may reach outside `dir`.
        if (!target.startsWith(dir)) throw new IOException("archive entry outside the archive: " + e.getName());
        if (e.isDirectory()) {
          Files.createDirectories(target);
        } else {
          Files.createDirectories(target.getParent());
          Files.copy(zip, target);
        }
      }
    }
  }

  /** The shallowest folder holding saved_model.pb (the first by name among equals). */
  private static Path savedModelFolder(Path dir) throws IOException {
    try (Stream<Path> files = Files.walk(dir)) {
      return files.filter(p -> p.getFileName().toString().equals("saved_model.pb")).map(Path::getParent)
          .min(Comparator.comparing(Path::toString))
          .orElseThrow(() -> new IllegalArgumentException("no saved_model.pb in the model archive"));
    }
  }

  private static void deleteTree(Path dir) {
    try (Stream<Path> files = Files.walk(dir)) {
      files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** serving_default, else predict, else the first by name. */
  private static String signatureKey(SavedModelBundle bundle) {
    List<String> keys = new ArrayList<>();
    for (Signature s : bundle.signatures()) keys.add(s.key());
    if (keys.isEmpty()) throw new IllegalArgumentException("SavedModel has no signatures");
    for (String preferred : PREFERRED_SIGNATURES) if (keys.contains(preferred)) return preferred;
    return keys.stream().sorted().findFirst().orElseThrow();
  }
}
