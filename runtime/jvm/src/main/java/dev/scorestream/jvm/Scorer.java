package dev.scorestream.jvm;

import static org.apache.spark.sql.functions.col;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;
import org.apache.spark.SparkFiles;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF6;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.pmml4s.model.Model;

/**
 * Decodes, routes, scores and writes up one record inside Spark's JVM.
 *
 * <p>{@code ss_score(key, value, topic, partition, offset, timestampMillis)} is made once per
 * micro-batch ({@link #forBatch}) with that batch's routing table (the driver fixes it when the
 * batch starts, so every partition sees the same model per dataType) and the batch's
 * {@link BatchCounts}, and put in the batch's plan as a column, not in the session's function
 * registry (replacing a function there every batch logged a warning every batch). For a PMML
 * model it returns what Spark's Kafka sink writes: the output topic and the prediction record, or
 * the dead-letter topic and the headers saying why. A record whose model is TensorFlow comes back
 * {@code pending}, with its features, in a micro-batch: {@link #tensorFlow} scores those rows
 * with TensorFlow's Java API, many rows a call, and writes them up the same way. A real-time
 * query's scorer ({@link #live}) scores them one by one as they come. So no record leaves the
 * JVM, and the statistics are counted where the scoring happens.
 *
 * <p>During a canary, a record goes to the candidate when the CRC32 of its key (of its value if
 * it has no key) falls in the candidate's share of 10,000 buckets: the same key always meets the
 * same version. During a shadow, every record the serving model scores is also scored by the
 * candidate; the two are compared and counted, and only the serving model's result is written.
 *
 * <p>Never throws for a bad record: the dead letter names the failing stage and reason.
 */
public final class Scorer implements UDF6<byte[], byte[], String, Integer, Long, Long, Row> {
  private static final long serialVersionUID = 1L;

  /** What ss_score reads of a Kafka source row, in order ({@code ts}: its timestamp in epoch ms). */
  static final String[] SOURCE_COLUMNS = {"key", "value", "topic", "partition", "offset", "ts"};
  static final String HEADERS_DDL = "ARRAY<STRUCT<key: STRING, value: BINARY>>";

  /**
   * What the scorer returns. {@code value} is null for a dead letter: it keeps the record's own.
   * {@code pending}: a micro-batch's TensorFlow slots, for {@link #tensorFlow}.
   */
  public static final String RESULT_DDL =
      "topic STRING, value BINARY, deadHeaders ARRAY<STRUCT<key: STRING, value: BINARY>>, "
          + "pending STRUCT<dataType: STRING, primary: STRUCT<" + Slot.DDL + ">, shadow: STRUCT<" + Slot.DDL + ">>";

  static final DataType RESULT_TYPE = DataType.fromDDL(RESULT_DDL);

  /** The job property Spark's streaming engine sets to the batch's id (MicroBatchExecution.BATCH_ID_KEY). */
  private static final String BATCH_ID = "streaming.sql.batchId";

  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final Map<String, Pmml> MODELS = new ConcurrentHashMap<>();

  private String tableJson; // null in a task of a draining real-time batch: writes nothing
  private final BatchCounts counts;
  private DriftCounts drift; // null: no drift histograms counted
  private final transient LiveTable live;
  private final boolean realTime; // a live scorer's: TensorFlow scores each record as it comes
  private transient Table table;
  private transient boolean noted;

  private Scorer(String tableJson, LiveTable live, BatchCounts counts) {
    this.tableJson = tableJson;
    this.live = live;
    this.realTime = live != null;
    this.counts = counts;
  }

  Scorer(String tableJson, BatchCounts counts) {
    this(tableJson, null, counts);
  }

  /** This batch's scorer; its routing table is checked here, on the driver, not in every task. */
  public static Scorer forBatch(String tableJson, BatchCounts counts) {
    Table.of(tableJson);
    return new Scorer(tableJson, counts);
  }

  /**
   * The scorer of a real-time query: each batch takes the table {@code live} holds when its tasks
   * are serialized (see {@link LiveTable}), and its predictions carry the batch's id from the
   * task's job properties, where Spark's streaming engine puts it.
   */
  public static Scorer live(LiveTable live, BatchCounts counts) {
    return new Scorer(null, live, counts);
  }

  /** Counts each scored record's features and prediction into {@code drift} too (see {@link DriftCounts}). */
  public Scorer withDrift(DriftCounts drift) {
    this.drift = drift;
    return this;
  }

  private void writeObject(java.io.ObjectOutputStream out) throws java.io.IOException {
    if (live != null) tableJson = live.take();
    out.defaultWriteObject();
  }

  /**
   * The batch's Kafka records, their timestamp as {@code ts} (epoch ms), and the scorer's result
   * {@code r} ({@link #RESULT_DDL}). The plan is built here in one call from Python: built there
   * from column functions it took 472 py4j round trips per batch, while the batch waited.
   */
  public Dataset<Row> score(Dataset<Row> batch) {
    Dataset<Row> rows = batch.select(col("key"), col("value"), col("headers"), col("topic"), col("partition"),
        col("offset"), functions.unix_millis(col("timestamp")).as("ts"));
    // Non-deterministic: the optimizer must not evaluate it twice for one row (it counts).
    return rows.select(col("*"), functions.udf(this, RESULT_TYPE).asNondeterministic().apply(columns(SOURCE_COLUMNS)).as("r"));
  }

  /** Rows a TensorFlow call takes at most: ~0.2 µs a row of the demo's model past ~1,000 (benchmarks/tf_costs.py). */
  static final int TENSORFLOW_ROWS = 4096;

  /**
   * {@link #score}'s rows with their TensorFlow results filled in and written up: each partition
   * read {@link #TENSORFLOW_ROWS} rows at a time, each route's pending rows among them scored in
   * one call, every row passed on in its order ({@code r} then holds no pending row).
   */
  public Dataset<Row> tensorFlow(Dataset<Row> scored) {
    return scored.mapPartitions(new TensorFlowBatches(), Encoders.row(scored.schema()));
  }

  /** Spark's Kafka sink, a batch write of {@link #sinkRows}. */
  public static void write(Dataset<Row> scored, Map<String, String> sinkOptions) {
    sinkRows(scored, maxRequestBytes(sinkOptions)).write().format("kafka").options(sinkOptions).save();
  }

  /** The sink producer's max.request.size: its own setting, else Kafka's default. */
  public static int maxRequestBytes(Map<String, String> sinkOptions) {
    String v = sinkOptions.get("kafka.max.request.size");
    try {
      return v == null ? DEFAULT_MAX_REQUEST_BYTES : Integer.parseInt(v.trim());
    } catch (NumberFormatException e) {
      return DEFAULT_MAX_REQUEST_BYTES; // the producer refuses it at its start anyway
    }
  }

  static final int DEFAULT_MAX_REQUEST_BYTES = 1_048_576;

  /**
   * What Spark's Kafka sink writes of scored rows: topic, key, value, headers ({@link SinkRow},
   * which sheds what a dead letter cannot fit in the sink's {@code max.request.size}).
   */
  public static Dataset<Row> sinkRows(Dataset<Row> scored, int maxRequestBytes) {
    return sinkRows(scored, maxRequestBytes, new Column[0]);
  }

  /** As above, with the source's partition and offset: what {@link PartitionTransactions} commits. */
  public static Dataset<Row> sinkRowsWithSource(Dataset<Row> scored, int maxRequestBytes) {
    return sinkRows(scored, maxRequestBytes, new Column[] {col(PartitionTransactions.SOURCE_PARTITION),
        col(PartitionTransactions.SOURCE_OFFSET)}, col("partition").as(PartitionTransactions.SOURCE_PARTITION),
        col("offset").as(PartitionTransactions.SOURCE_OFFSET));
  }

  private static Dataset<Row> sinkRows(Dataset<Row> scored, int maxRequestBytes, Column[] carried, Column... source) {
    Column r = col("r");
    // Non-deterministic, as the scorer: the optimizer must not inline it once per field it is read for.
    Column sink = functions.udf(new SinkRow(maxRequestBytes), SinkRow.TYPE).asNondeterministic().apply(
        r.getField("topic"), col("key"), r.getField("value"), col("value"), col("headers"), r.getField("deadHeaders"));
    Dataset<Row> rows = scored.select(concat(new Column[] {sink.as("s")}, source));
    return rows.select(concat(new Column[] {col("s.topic").as("topic"), col("s.key").as("key"),
        col("s.value").as("value"), col("s.headers").as("headers")}, carried));
  }

  private static Column[] concat(Column[] a, Column[] b) {
    Column[] c = java.util.Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, c, a.length, b.length);
    return c;
  }

  private static Column[] columns(String[] names) {
    Column[] c = new Column[names.length];
    for (int i = 0; i < names.length; i++) c[i] = col(names[i]);
    return c;
  }

  /** The result schema, for Python to read instead of restating it. */
  public static String resultDdl() {
    return RESULT_DDL;
  }

  private Table table() {
    if (table == null) {
      table = Table.of(tableJson);
      TaskContext task = TaskContext.get();
      String batch = task == null ? null : task.getLocalProperty(BATCH_ID);
      if (batch != null) table.batchId = Long.parseLong(batch);
    }
    if (!noted) {
      counts.noteWorker();
      noted = true;
    }
    return table;
  }

  @Override
  public Row call(byte[] key, byte[] value, String topic, Integer partition, Long offset, Long timestamp) {
    if (tableJson == null) return null; // a draining batch: nothing written, nothing counted
    Table t = table();
    counts.received();
    Records.Source src = new Records.Source(key, value, topic, partition, offset, timestamp);
    Map<String, Object> fields;
    try {
      fields = t.protobuf == null ? RecordFields.decodeJson(value) : Protobuf.decode(value, t.protobuf);
    } catch (Exception e) {
      return finish(t, counts, src, null, Slot.failure(null, "decode", message(e)), null);
    }
    Object dt = fields.get(t.dataTypeField);
    if (!(dt instanceof String)) {
      String why = dt == null ? "missing" : "not a string";
      return finish(t, counts, src, null, Slot.failure(null, "decode", "field '" + t.dataTypeName + "' is " + why), null);
    }
    String dataType = (String) dt;
    Route route = t.routes.get(dataType);
    if (route == null) {
      String why =
          t.served == null || t.served.contains(dataType)
              ? "no model is serving dataType '" + dataType + "'"
              : "dataType '" + dataType + "' is not served by this job";
      return finish(t, counts, src, dataType, Slot.failure(null, "route", why), null);
    }
    Route candidate = route.candidate;
    Slot primary;
    Slot shadow = null;
    if (candidate != null && candidate.share > 0 && bucket(key, value) < candidate.share) {
      primary = now(candidate, evaluate(candidate, fields));
    } else {
      primary = now(route, evaluate(route, fields));
      if (candidate != null && candidate.shadow && !primary.failed()) shadow = now(candidate, evaluate(candidate, fields));
    }
    if (!primary.done() || (shadow != null && !shadow.done())) {
      Row pending = RowFactory.create(dataType, primary.toRow(), shadow == null ? null : shadow.toRow());
      return RowFactory.create(null, null, null, pending);
    }
    return observed(finish(t, counts, src, dataType, primary, shadow), primary, shadow);
  }

  /**
   * A real-time query's TensorFlow slot, scored as its record comes (one row a call: a real-time
   * task has no batch to wait for); a micro-batch's waits for {@link #tensorFlow}.
   */
  private Slot now(Route route, Slot s) {
    if (realTime && !s.done()) predict(route, List.of(s));
    return s;
  }

  /**
   * One call of {@code route}'s TensorFlow model on these slots' features, their results filled
   * in; a failure fails them all, each saying why. Each slot's nanos: its share of the call.
   */
  static void predict(Route route, List<Slot> slots) {
    try (TensorFlowModels.Lease lease = TensorFlowModels.JVM.acquire(route.file)) {
      predict(lease.model, route.inputs.length, slots);
    } catch (Exception e) {
      fail(slots, TensorFlowModel.describe(e));
    }
  }

  /** As above, with the model given: the {@link Verifier}'s, which does not serve yet. */
  static void predict(TensorFlowModel model, int width, List<Slot> slots) {
    int n = slots.size();
    double[] features = new double[n * width];
    for (int i = 0; i < n; i++) System.arraycopy(slots.get(i).features, 0, features, i * width, width);
    try {
      long t0 = System.nanoTime();
      TensorFlowModel.Output out = model.predict(features, n);
      long each = (System.nanoTime() - t0) / n;
      for (int i = 0; i < n; i++) {
        Slot s = slots.get(i);
        s.prediction = out.prediction(i);
        s.label = out.label(i);
        s.outputs = out.outputs(i);
        s.nanos = each;
      }
    } catch (RuntimeException e) { // TensorFlow's status of the call: every row of it failed
      fail(slots, TensorFlowModel.describe(e));
    }
  }

  /** The slots still waiting for TensorFlow among these, scored {@link #TENSORFLOW_ROWS} a call. */
  static void predictWaiting(TensorFlowModel model, int width, List<Slot> slots) {
    List<Slot> waiting = new ArrayList<>();
    for (Slot s : slots) if (!s.done()) waiting.add(s);
    for (int i = 0; i < waiting.size(); i += TENSORFLOW_ROWS) {
      predict(model, width, waiting.subList(i, Math.min(waiting.size(), i + TENSORFLOW_ROWS)));
    }
  }

  private static void fail(List<Slot> slots, String why) {
    for (Slot s : slots) {
      s.stage = "score";
      s.error = why;
    }
  }

  /** Scores the pending slots of a partition's rows, a chunk at a time (see {@link #tensorFlow}). */
  final class TensorFlowBatches implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<Row> call(Iterator<Row> rows) {
      return new Iterator<>() {
        private final List<Row> chunk = new ArrayList<>(TENSORFLOW_ROWS);
        private int next;

        @Override
        public boolean hasNext() {
          if (next < chunk.size()) return true;
          chunk.clear();
          next = 0;
          while (chunk.size() < TENSORFLOW_ROWS && rows.hasNext()) chunk.add(rows.next());
          if (chunk.isEmpty()) return false;
          score(chunk);
          return true;
        }

        @Override
        public Row next() {
          if (!hasNext()) throw new java.util.NoSuchElementException();
          return chunk.get(next++);
        }
      };
    }

    /** The chunk's pending rows scored, one call per route, and written up in place. */
    private void score(List<Row> chunk) {
      Table t = table();
      int rIndex = chunk.get(0).fieldIndex("r");
      Map<String, Route> routes = t.byKey();
      Map<String, List<Slot>> waiting = new LinkedHashMap<>();
      Slot[][] slots = new Slot[chunk.size()][];
      for (int i = 0; i < chunk.size(); i++) {
        Row r = chunk.get(i).getStruct(rIndex);
        if (r == null || r.isNullAt(3)) continue;
        Row pending = r.getStruct(3);
        Slot p = Slot.fromRow(pending.getStruct(1)), s = Slot.fromRow(pending.getStruct(2));
        slots[i] = new Slot[] {p, s};
        for (Slot slot : slots[i]) {
          if (slot != null && !slot.done()) waiting.computeIfAbsent(slot.route, k -> new ArrayList<>()).add(slot);
        }
      }
      for (Map.Entry<String, List<Slot>> e : waiting.entrySet()) {
        Route route = routes.get(e.getKey());
        if (route != null) predict(route, e.getValue());
        else fail(e.getValue(), "no model " + e.getKey() + " in this batch's routing table");
      }
      for (int i = 0; i < chunk.size(); i++) {
        if (slots[i] == null) continue;
        Row row = chunk.get(i);
        Records.Source src = new Records.Source(row.getAs("key"), row.getAs("topic"), row.getAs("partition"),
            row.getAs("offset"), row.getAs("ts"));
        String dataType = row.getStruct(rIndex).getStruct(3).getString(0);
        Slot p = slots[i][0], s = slots[i][1];
        Row result = encodable(observed(finish(t, counts, src, dataType, p, s), p, s));
        Object[] values = new Object[row.length()];
        for (int c = 0; c < values.length; c++) values[c] = c == rIndex ? result : row.get(c);
        chunk.set(i, RowFactory.create(values));
      }
    }
  }

  /**
   * A result as Spark's row encoder takes it back: a dead letter's headers a Scala sequence (a
   * UDF's result may hold a Java list; {@link Encoders#row} does not convert one).
   */
  private static Row encodable(Row result) {
    if (!(result.get(2) instanceof List)) return result;
    List<?> headers = (List<?>) result.get(2);
    return RowFactory.create(result.get(0), result.get(1),
        scala.jdk.javaapi.CollectionConverters.asScala(headers).toSeq(), result.get(3));
  }

  /** A written prediction's features and predicted values, into the drift histograms. */
  private Row observed(Row result, Slot p, Slot s) {
    if (drift == null || result.isNullAt(1)) return result; // a dead letter keeps no value of ours
    drift.observe(p.route, p.features, p.prediction);
    if (s != null && !s.failed()) drift.observe(s.route, s.features, s.prediction);
    return result;
  }

  /** The record's outcome: counted, and written up for the output or the dead-letter topic. */
  static Row finish(Table t, BatchCounts counts, Records.Source src, String dataType, Slot p, Slot s) {
    if (p.failed()) {
      counts.failed(p.route);
      return Records.deadLetter(t.deadLetterTopic, src, p.stage, p.error, p.route, t.batchId);
    }
    if (p.prediction == null && p.label == null) {
      // A TensorFlow slot that came back without a result: a fault of ours, not of the record.
      counts.failed(p.route);
      return Records.deadLetter(t.deadLetterTopic, src, "score", "model produced no prediction", p.route, t.batchId);
    }
    byte[] record = Records.prediction(src, dataType, p, t.batchId);
    if (Records.keyBytes(src) + record.length > Records.MAX_RECORD_BYTES) {
      // The prediction repeats the key (escaped): a huge key makes a record the sink cannot write.
      counts.failed(p.route);
      return Records.deadLetter(t.deadLetterTopic, src, "validate", "record key of " + Records.keyBytes(src)
          + " bytes: its prediction would exceed the " + Records.MAX_RECORD_BYTES + " bytes a record may have",
          p.route, t.batchId);
    }
    if (s != null) compare(counts, p, s);
    counts.scored(p.route, p.nanos);
    return RowFactory.create(t.outputTopic, record, null, null);
  }

  /** A shadow agrees when it predicts the same label (classifiers) or the same value. */
  private static void compare(BatchCounts counts, Slot p, Slot s) {
    boolean scored = !s.failed() && s.prediction != null;
    boolean same;
    if (p.label != null && s.label != null) same = p.label.equals(s.label);
    else same = p.prediction != null && s.prediction != null && p.prediction.doubleValue() == s.prediction.doubleValue();
    double diff = scored && p.prediction != null ? Math.abs(p.prediction - s.prediction) : 0.0;
    counts.compared(s.route, scored, scored && same, diff, s.nanos);
  }

  /** 0..9999 from the record's key: which records a canary gets. */
  static int bucket(byte[] key, byte[] value) {
    CRC32 crc = new CRC32();
    byte[] b = key != null ? key : value;
    if (b != null) crc.update(b, 0, b.length);
    return (int) (crc.getValue() % 10000L);
  }

  /** One model on one record: its features, and for PMML its prediction (TensorFlow scores later). */
  static Slot evaluate(Route route, Map<String, Object> fields) {
    return evaluate(route, fields, null);
  }

  /**
   * As above, with the PMML model given ({@code null}: the route's file, loaded once per JVM). The
   * {@link Verifier} scores a model that does not serve yet through here, so verification and
   * serving share every step from the record's fields to the prediction.
   */
  static Slot evaluate(Route route, Map<String, Object> fields, Pmml given) {
    double[] features = new double[route.inputs.length];
    for (int i = 0; i < features.length; i++) {
      Object v = fields.get(route.normalized[i]);
      if (v == null) return Slot.failure(route.key, "validate", "missing field '" + route.inputs[i] + "'");
      if (!(v instanceof Double)) {
        return Slot.failure(route.key, "validate", "field '" + route.inputs[i] + "' is not a number");
      }
      features[i] = (Double) v;
    }
    if (!route.pmml) {
      Slot s = new Slot(route.key, true);
      s.features = features;
      return s;
    }
    try {
      Pmml model = given != null ? given : MODELS.get(route.file);
      if (model == null) {
        if (MODELS.size() >= 8) MODELS.clear(); // swapped-out models: let them be collected
        model = MODELS.computeIfAbsent(route.file, Pmml::load);
      }
      Object[] in = new Object[features.length];
      for (int i = 0; i < in.length; i++) in[i] = features[i];
      long t0 = System.nanoTime();
      Object[] out = model.model.predict((Object) in);
      Slot s = model.result(route.key, out, System.nanoTime() - t0);
      s.features = features; // for the drift histograms
      return s;
    } catch (Exception e) {
      return Slot.failure(route.key, "score", message(e));
    }
  }

  private static String message(Throwable e) {
    String m = e.getMessage();
    // First line only: Jackson appends source locations that say nothing useful here.
    if (m != null) m = m.split("\n", 2)[0];
    return e.getClass().getSimpleName() + (m == null ? "" : ": " + m);
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


  /** A route, ready to use: inputs normalised as record fields are. */
  static final class Route {
    final String key;
    final boolean pmml;
    final String file;
    final String[] inputs;
    final String[] normalized;
    final Route candidate;
    final boolean shadow;
    final int share;

    Route(RoutingTable.Route r) {
      key = r.key;
      pmml = "pmml".equals(r.format);
      file = r.file;
      inputs = r.inputs.toArray(new String[0]);
      normalized = new String[inputs.length];
      for (int i = 0; i < inputs.length; i++) normalized[i] = RecordFields.normalize(inputs[i]);
      candidate = r.candidate == null ? null : new Route(r.candidate);
      shadow = "shadow".equals(r.mode);
      share = r.share;
    }
  }

  /** The routing table of one batch, parsed once per task. */
  static final class Table {
    String dataTypeField; // normalized, as record keys are
    String dataTypeName; // as configured, for messages
    Set<String> served;
    final Map<String, Route> routes = new HashMap<>();
    Protobuf.Field[] protobuf;
    long batchId;
    String outputTopic;
    String deadLetterTopic;
    private transient Map<String, Route> byKey;

    /** Every route of the table, candidates included, by its key (name:version). */
    Map<String, Route> byKey() {
      if (byKey == null) {
        byKey = new HashMap<>();
        for (Route r : routes.values()) {
          byKey.put(r.key, r);
          if (r.candidate != null) byKey.put(r.candidate.key, r.candidate);
        }
      }
      return byKey;
    }

    static Table of(String json) {
      RoutingTable r = RoutingTable.parse(json);
      Table t = new Table();
      t.dataTypeName = r.dataTypeField;
      t.dataTypeField = RecordFields.normalize(r.dataTypeField);
      t.served = r.served == null ? null : new HashSet<>(r.served);
      for (Map.Entry<String, RoutingTable.Route> e : r.routes.entrySet()) t.routes.put(e.getKey(), new Route(e.getValue()));
      t.protobuf = r.protobuf == null ? null : Protobuf.fields(r.protobuf);
      t.batchId = r.batchId;
      t.outputTopic = r.outputTopic;
      t.deadLetterTopic = r.deadLetterTopic;
      return t;
    }
  }

  static final class Pmml {
    final Model model;
    final PmmlOutputs outputs;

    Pmml(Model model) {
      this.model = model;
      this.outputs = new PmmlOutputs(model);
    }

    static Pmml load(String file) {
      File f = new File(file);
      if (!f.isAbsolute() || !f.exists()) f = new File(SparkFiles.get(file));
      // Untrusted: no DOCTYPE, bounded size and nesting. Read once, so PMML4S parses the bytes
      // that were checked (a second read of the file could meet another file).
      return new Pmml(Model.fromBytes(SafeXml.read(f)));
    }

    /** PMML4S's output row as a slot: the predicted value, or the most probable class. */
    Slot result(String route, Object[] out, long nanos) {
      PmmlOutputs.Prediction p = outputs.read(out);
      if (p == null) {
        Slot f = Slot.failure(route, "score", "model produced no prediction");
        f.raw = out;
        return f;
      }
      Slot s = new Slot(route, false);
      s.raw = out;
      s.prediction = p.value;
      s.label = p.label;
      s.outputs = p.outputs;
      s.nanos = nanos;
      return s;
    }
  }
}
