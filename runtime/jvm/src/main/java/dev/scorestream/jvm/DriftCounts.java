package dev.scorestream.jvm;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.util.AccumulatorV2;

/**
 * Per served model version (route {@code name:version}): streaming histograms of each input
 * feature and of the prediction, counted by the scorer as it scores each record, and how far they
 * moved from the model's baseline ({@link Drift#psi PSI} and {@link Drift#ks KS}).
 *
 * <p>The baseline is the model's verification sample, scored by the model itself when the driver
 * admits it ({@link #baseline}): its features' and predictions' deciles cut each histogram's bins.
 * A Spark accumulator as {@link BatchCounts} is, beside it: tasks count into their copies (which
 * carry the baselines, not the counts), Spark merges them into the driver's. Unlike BatchCounts
 * the driver never resets it: the histograms cover everything a version scored in this run, which
 * is what a canary's verdict wants. A retried task counts twice, as with every accumulator.
 *
 * <p>Models without a baseline (no sample, or a TensorFlow model: its predictions are made
 * outside the JVM when it is admitted) are not counted.
 */
public final class DriftCounts extends AccumulatorV2<Object, String> {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();

  /** A model's bins and the baseline's histograms: fixed once made, shared by every copy. */
  static final class Baseline implements Serializable {
    private static final long serialVersionUID = 1L;
    final String[] features;
    final double[][] edges; // per feature, then the prediction's last
    final long[][] expected;
    final int records;

    Baseline(String[] features, double[][] columns, int records) {
      this.features = features;
      this.records = records;
      edges = new double[columns.length][];
      expected = new long[columns.length][];
      for (int i = 0; i < columns.length; i++) {
        edges[i] = Drift.edges(columns[i], Drift.BINS);
        expected[i] = Drift.histogram(edges[i], columns[i]);
      }
    }
  }

  // Written by the driver (a model admitted) while tasks are serialized from it: concurrent.
  private ConcurrentHashMap<String, Baseline> baselines = new ConcurrentHashMap<>();
  private HashMap<String, long[][]> seen = new HashMap<>();

  public DriftCounts() {}

  // -- the baseline, on the driver --------------------------------------------------------------

  /**
   * Makes {@code route}'s baseline: each sample record (JSON, one per line) decoded as the scorer
   * decodes records, and scored by the model at {@code path} (format pmml or tensorflow), as
   * serving scores. Records that fail are left out. Returns how many records the baseline holds
   * (0: none, no baseline).
   */
  public int baseline(String route, String format, String path, List<String> inputs, String jsonLines)
      throws Exception {
    RoutingTable.Route r = new RoutingTable.Route();
    r.key = route;
    r.format = format;
    r.file = path;
    r.inputs = inputs;
    Scorer.Route scorerRoute = new Scorer.Route(r);
    boolean pmml = "pmml".equals(format);
    Scorer.Pmml model = pmml ? Scorer.Pmml.load(path) : null;
    List<Slot> slots = new ArrayList<>();
    for (String line : jsonLines.split("\n")) {
      if (line.isBlank()) continue;
      try {
        slots.add(Scorer.evaluate(scorerRoute, RecordFields.decodeJson(line.getBytes(StandardCharsets.UTF_8)), model));
      } catch (Exception e) {
        // a record the scorer would dead-letter is no part of what the model sees
      }
    }
    if (!pmml) {
      try (TensorFlowModel tf = TensorFlowModel.load(java.nio.file.Path.of(path))) {
        Scorer.predictWaiting(tf, inputs.size(), slots);
      }
    }
    List<double[]> rows = new ArrayList<>();
    for (Slot s : slots) {
      if (s.failed() || s.prediction == null || s.features == null) continue;
      double[] row = java.util.Arrays.copyOf(s.features, s.features.length + 1);
      row[s.features.length] = s.prediction;
      rows.add(row);
    }
    if (rows.isEmpty()) return 0;
    double[][] columns = new double[inputs.size() + 1][rows.size()];
    for (int j = 0; j < rows.size(); j++) {
      for (int i = 0; i < columns.length; i++) columns[i][j] = rows.get(j)[i];
    }
    baselines.put(route, new Baseline(inputs.toArray(new String[0]), columns, rows.size()));
    return rows.size();
  }

  /** The baseline of tests and benchmarks: columns given, the prediction's last. */
  void baseline(String route, String[] features, double[][] columns) {
    baselines.put(route, new Baseline(features, columns, columns[0].length));
  }

  // -- counting, on the executors ---------------------------------------------------------------

  /** A record a model scored: its features (in the model's input order) and its prediction. */
  void observe(String route, double[] features, Double prediction) {
    Baseline b = baselines.get(route);
    if (b == null || features == null || prediction == null) return;
    long[][] h = seen.get(route);
    if (h == null) {
      h = new long[b.edges.length][];
      for (int i = 0; i < h.length; i++) h[i] = new long[b.edges[i].length + 1];
      seen.put(route, h);
    }
    int last = b.edges.length - 1;
    for (int i = 0; i < last && i < features.length; i++) {
      int k = Drift.bin(b.edges[i], features[i]);
      if (k >= 0) h[i][k]++;
    }
    int k = Drift.bin(b.edges[last], prediction);
    if (k >= 0) h[last][k]++;
  }

  // -- AccumulatorV2 ----------------------------------------------------------------------------

  @Override
  public boolean isZero() {
    return seen.isEmpty();
  }

  @Override
  public DriftCounts copy() {
    DriftCounts c = new DriftCounts();
    c.baselines = baselines; // immutable entries; a copy sees models admitted later too
    c.merge(this);
    return c;
  }

  /** Forgets the counts, keeps the baselines: what a task's copy starts from. */
  @Override
  public synchronized void reset() {
    seen = new HashMap<>();
  }

  @Override
  public void add(Object v) {
    throw new UnsupportedOperationException("DriftCounts is filled by the scorer");
  }

  @Override
  public synchronized void merge(AccumulatorV2<Object, String> other) {
    DriftCounts o = (DriftCounts) other;
    for (Map.Entry<String, long[][]> e : o.seen.entrySet()) {
      long[][] mine = seen.get(e.getKey());
      if (mine == null) {
        mine = new long[e.getValue().length][];
        for (int i = 0; i < mine.length; i++) mine[i] = new long[e.getValue()[i].length];
        seen.put(e.getKey(), mine);
      }
      for (int i = 0; i < mine.length; i++) {
        for (int k = 0; k < mine[i].length; k++) mine[i][k] += e.getValue()[i][k];
      }
    }
  }

  /**
   * Per route with a baseline, as JSON ({@code scorestream.api.scoring.RouteDrift}): records
   * counted, the baseline's size, and per feature and for the prediction PSI and KS (null until a
   * record was counted).
   */
  @Override
  public synchronized String value() {
    Map<String, Object> out = new LinkedHashMap<>();
    for (Map.Entry<String, Baseline> e : new java.util.TreeMap<>(baselines).entrySet()) {
      Baseline b = e.getValue();
      long[][] h = seen.get(e.getKey());
      int last = b.edges.length - 1;
      Map<String, Object> features = new LinkedHashMap<>();
      for (int i = 0; i < last; i++) features.put(b.features[i], measure(b.expected[i], h == null ? null : h[i]));
      Map<String, Object> r = new LinkedHashMap<>();
      r.put("records", h == null ? 0 : Drift.sum(h[last]));
      r.put("baselineRecords", b.records);
      r.put("features", features);
      r.put("prediction", measure(b.expected[last], h == null ? null : h[last]));
      out.put(e.getKey(), r);
    }
    try {
      return JSON.writeValueAsString(out);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  private static Map<String, Object> measure(long[] expected, long[] actual) {
    Map<String, Object> m = new LinkedHashMap<>();
    double psi = actual == null ? Double.NaN : Drift.psi(expected, actual);
    double ks = actual == null ? Double.NaN : Drift.ks(expected, actual);
    m.put("psi", Double.isNaN(psi) ? null : psi);
    m.put("ks", Double.isNaN(ks) ? null : ks);
    return m;
  }
}
