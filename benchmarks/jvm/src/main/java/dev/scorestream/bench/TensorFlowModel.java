package dev.scorestream.bench;

import com.fasterxml.jackson.databind.JsonNode;
import dev.scorestream.jvm.RecordFields;
import dev.scorestream.jvm.Records;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipInputStream;
import org.tensorflow.Result;
import org.tensorflow.SavedModelBundle;
import org.tensorflow.SessionFunction;
import org.tensorflow.Signature;
import org.tensorflow.ndarray.Shape;
import org.tensorflow.ndarray.buffer.DataBuffers;
import org.tensorflow.proto.ConfigProto;
import org.tensorflow.proto.DataType;
import org.tensorflow.types.TFloat32;

/**
 * A TensorFlow SavedModel from scorestream's JSON descriptor (the SavedModel zipped, and the record
 * fields it takes, in order), scored as scorestream's TensorFlow path scores it (runtime/tf_model.py,
 * runtime/pipeline.py): the signature {@code serving_default}, else {@code predict}, else the first
 * by name; its one dense (None, n) input fed the record's fields as float32; its first output by name
 * read as class scores (the argmax as prediction and label, each score under its class index) or,
 * when it holds one value, as the prediction. Decoding and the output record are scorestream's own
 * code (RecordFields, Records), as for PMML.
 *
 * <p>One model call per record: Kafka Streams hands a processor one record at a time, where
 * scorestream calls the model once per Arrow batch. That difference is the architecture's, and is
 * what the benchmark measures.
 */
final class TensorFlowModel implements ScoringModel {
  static final String TAG = "serve";
  private static final List<String> PREFERRED_SIGNATURES = List.of("serving_default", "predict");
  private static final String[] CLASS_KEYS = new String[256]; // "0", "1", ...: not made per record

  static {
    for (int i = 0; i < CLASS_KEYS.length; i++) CLASS_KEYS[i] = Integer.toString(i);
  }

  private final String route;
  private final SavedModelBundle bundle; // owns the session the function runs in
  private final SessionFunction function;
  private final String inputKey;
  private final String outputKey;
  private final String[] inputs;
  private final String[] normalized;

  private TensorFlowModel(String route, SavedModelBundle bundle, SessionFunction function, String inputKey,
      String outputKey, String[] inputs) {
    this.route = route;
    this.bundle = bundle;
    this.function = function;
    this.inputKey = inputKey;
    this.outputKey = outputKey;
    this.inputs = inputs;
    this.normalized = new String[inputs.length];
    for (int i = 0; i < inputs.length; i++) normalized[i] = RecordFields.normalize(inputs[i]);
  }

  /**
   * {name, version, dataType, format: "tensorflow", inputs: [field...], data: base64 zip of a
   * SavedModel} (ScoringModel.fromDescriptor). A replaced model is not closed: a stream thread may
   * still be in a call on its session, and the benchmark serves one model.
   */
  static TensorFlowModel fromDescriptor(JsonNode d) throws Exception {
    if (d.hasNonNull("graph")) throw new IllegalArgumentException("frozen graphs are not served by this peer");
    String[] inputs = inputNames(d);
    byte[] archive = Base64.getDecoder().decode(d.get("data").asText());
    SavedModelBundle bundle = load(archive);
    try {
      SessionFunction function = bundle.function(signatureKey(bundle));
      Signature signature = function.signature();
      String inputKey = denseInput(signature, inputs.length);
      String outputKey = floatOutput(signature);
      String route = d.get("name").asText() + ":" + d.get("version").asText();
      return new TensorFlowModel(route, bundle, function, inputKey, outputKey, inputs);
    } catch (RuntimeException e) {
      bundle.close();
      throw e;
    }
  }

  @Override
  public String route() {
    return route;
  }

  @Override
  public byte[] score(Map<String, Object> fields, byte[] key, String topic, int partition, long offset,
      long eventTime) throws Exception {
    float[] row = new float[inputs.length];
    for (int i = 0; i < inputs.length; i++) row[i] = ScoringModel.number(fields, normalized[i], inputs[i]).floatValue();
    long t0 = System.nanoTime();
    Output out = predict(row);
    long nanos = System.nanoTime() - t0;

    String dataType = (String) fields.get(KStreamsPeer.DATA_TYPE_FIELD);
    if (out.oneValue) {
      double value = out.values[0];
      return Records.prediction(key, topic, partition, offset, eventTime, dataType, route, value, null,
          Map.of(outputKey, value), nanos, -1);
    }
    int best = argmax(out.values);
    return Records.prediction(key, topic, partition, offset, eventTime, dataType, route, (double) best,
        classKey(best), scores(out.values), nanos, -1);
  }

  /** The output for one row: its values, and whether they are one prediction or class scores. */
  record Output(float[] values, boolean oneValue) {}

  /** One row through the signature. */
  Output predict(float[] row) {
    try (TFloat32 x = TFloat32.tensorOf(Shape.of(1, row.length), DataBuffers.of(row, true, false));
        Result result = function.call(Map.of(inputKey, x))) {
      TFloat32 y = (TFloat32) result.get(outputKey).orElseThrow(
          () -> new IllegalStateException("the model returned no '" + outputKey + "'"));
      Shape shape = y.shape();
      if (shape.numDimensions() == 0 || shape.get(0) != 1) {
        throw new IllegalStateException("the model returned " + shape + " for one row");
      }
      float[] values = new float[(int) shape.size()];
      y.copyTo(DataBuffers.of(values, false, false));
      // As runtime/tf_model.interpret reads a batch: (rows,) or (rows, 1) is one value a row.
      boolean oneValue = shape.numDimensions() == 1 || (shape.numDimensions() == 2 && shape.get(1) == 1);
      return new Output(values, oneValue);
    }
  }

  /** The first of the highest scores, as numpy's argmax picks. */
  static int argmax(float[] scores) {
    int best = 0;
    for (int i = 1; i < scores.length; i++) if (scores[i] > scores[best]) best = i;
    return best;
  }

  static Map<String, Double> scores(float[] values) {
    Map<String, Double> out = new LinkedHashMap<>(values.length * 2);
    for (int i = 0; i < values.length; i++) out.put(classKey(i), (double) values[i]);
    return out;
  }

  static String classKey(int i) {
    return i < CLASS_KEYS.length ? CLASS_KEYS[i] : Integer.toString(i);
  }

  /**
   * One thread for each of TensorFlow's pools, as each of scorestream's Python workers runs
   * (runtime/tf_model._tf): each stream thread's call then runs its small graph on its own, as a
   * worker does, instead of handing ops to pools the other stream thread competes for.
   */
  static ConfigProto sessionConfig() {
    return ConfigProto.newBuilder().setIntraOpParallelismThreads(1).setInterOpParallelismThreads(1).build();
  }

  private static String[] inputNames(JsonNode d) {
    JsonNode inputs = d.path("inputs");
    if (!inputs.isArray() || inputs.isEmpty()) {
      throw new IllegalArgumentException("a TensorFlow descriptor needs its input fields, in order (inputs)");
    }
    String[] names = new String[inputs.size()];
    for (int i = 0; i < names.length; i++) names[i] = inputs.get(i).asText();
    return names;
  }

  /** The SavedModel in a zip archive, loaded; the unpacked files are removed once it is. */
  static SavedModelBundle load(byte[] archive) throws IOException {
    Path dir = Files.createTempDirectory("scorestream-bench-tf-");
    try {
      unzip(archive, dir);
      return SavedModelBundle.loader(savedModelFolder(dir).toString()).withTags(TAG)
          .withConfigProto(sessionConfig()).load();
    } finally {
      deleteTree(dir);
    }
  }

  private static void unzip(byte[] archive, Path dir) throws IOException {
    try (ZipInputStream zip = new ZipInputStream(new ByteArrayInputStream(archive))) {
      for (ZipEntry e; (e = zip.getNextEntry()) != null; ) {
        Path target = dir.resolve(e.getName()).normalize();
        // The archive comes off the models topic: none of its names may reach outside `dir`.
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

  /** The shallowest folder holding saved_model.pb, as runtime/tf_model.saved_model_folder finds it. */
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

  /** serving_default, else predict, else the first by name: runtime/tf_model.load's choice. */
  private static String signatureKey(SavedModelBundle bundle) {
    List<String> keys = new ArrayList<>();
    for (Signature s : bundle.signatures()) keys.add(s.key());
    if (keys.isEmpty()) throw new IllegalArgumentException("SavedModel has no signatures");
    for (String preferred : PREFERRED_SIGNATURES) if (keys.contains(preferred)) return preferred;
    return keys.stream().sorted().findFirst().orElseThrow();
  }

  /** The signature's one input: dense float32 (None, n), n the descriptor's field count. */
  private static String denseInput(Signature signature, int fields) {
    Map<String, Signature.TensorDescription> in = signature.getInputs();
    if (in.size() != 1) {
      throw new IllegalArgumentException("signature '" + signature.key() + "' has " + in.size()
          + " inputs; one dense (None, n) input is supported");
    }
    Map.Entry<String, Signature.TensorDescription> input = in.entrySet().iterator().next();
    Shape shape = input.getValue().shape;
    if (shape.isUnknown() || shape.numDimensions() != 2 || shape.get(1) < 0) {
      throw new IllegalArgumentException("signature '" + signature.key() + "' input '" + input.getKey()
          + "' has shape " + shape + "; (None, n) is supported");
    }
    if (shape.get(1) != fields) {
      throw new IllegalArgumentException("model takes " + shape.get(1) + " inputs but " + fields + " are configured");
    }
    if (input.getValue().dataType != DataType.DT_FLOAT) {
      throw new IllegalArgumentException("input '" + input.getKey() + "' is " + input.getValue().dataType
          + "; this peer feeds float32");
    }
    return input.getKey();
  }

  /** The signature's first output by name, as scorestream reads it; float32, as a Keras model's. */
  private static String floatOutput(Signature signature) {
    String key = signature.outputNames().stream().sorted().findFirst()
        .orElseThrow(() -> new IllegalArgumentException("signature '" + signature.key() + "' has no outputs"));
    DataType type = signature.getOutputs().get(key).dataType;
    if (type != DataType.DT_FLOAT) {
      throw new IllegalArgumentException("output '" + key + "' is " + type + "; this peer reads float32");
    }
    return key;
  }
}
