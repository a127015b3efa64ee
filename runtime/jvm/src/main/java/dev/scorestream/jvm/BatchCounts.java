package dev.scorestream.jvm;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.spark.SparkEnv;
import org.apache.spark.util.AccumulatorV2;

/**
 * A micro-batch's serving statistics, counted by the scorer as it scores: records in, out and
 * dead-lettered, scoring time per model (count, sum, min, max), a latency histogram, a shadow's
 * comparisons, and which executors took part.
 *
 * <p>A Spark accumulator: each task counts into its own copy and Spark merges the copies into the
 * driver's when the task succeeds, so the statistics cost no second pass over the data and no
 * Python. The driver resets it before each batch and reads {@link #value()} (JSON, the shape of
 * {@code scorestream.api.scoring.BatchCounts}) after it; a real-time query's driver {@link #drain
 * drains} it as each batch's progress is reported. As with every accumulator updated in a
 * transformation, a task that is retried counts twice: a lost executor can inflate one batch.
 */
public final class BatchCounts extends AccumulatorV2<Object, String> {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();

  /** Per model: what the report's ModelServingInfo is made of. */
  static final class RouteCounts implements java.io.Serializable {
    long n, err, sum;
    long min = Long.MAX_VALUE, max = Long.MIN_VALUE;

    void merge(RouteCounts o) {
      n += o.n;
      err += o.err;
      sum += o.sum;
      min = Math.min(min, o.min);
      max = Math.max(max, o.max);
    }
  }

  /** Per shadow: records compared, failed, agreeing, summed |difference| and scoring time. */
  static final class ShadowCounts implements java.io.Serializable {
    long n, err, agree, sum;
    double diff;

    void merge(ShadowCounts o) {
      n += o.n;
      err += o.err;
      agree += o.agree;
      diff += o.diff;
      sum += o.sum;
    }
  }

  private final long[] bounds; // histogram upper bounds, nanoseconds
  private long in, out, dead, nanos;
  private long[] buckets; // not cumulative here; value() makes them so
  private HashMap<String, RouteCounts> routes = new HashMap<>();
  private HashMap<String, ShadowCounts> shadows = new HashMap<>();
  private TreeSet<String> workers = new TreeSet<>();

  /** @param boundsNanos the histogram's upper bounds, comma-separated, ascending */
  public BatchCounts(String boundsNanos) {
    this(parse(boundsNanos));
  }

  private BatchCounts(long[] bounds) {
    this.bounds = bounds;
    this.buckets = new long[bounds.length];
  }

  private static long[] parse(String csv) {
    String[] parts = csv.split(",");
    long[] b = new long[parts.length];
    for (int i = 0; i < b.length; i++) b[i] = Long.parseLong(parts[i].trim());
    return b;
  }

  // -- counting, on the executors ---------------------------------------------------------------

  void received() {
    in++;
  }

  void noteWorker() {
    SparkEnv env = SparkEnv.get();
    workers.add(env == null ? "driver" : env.executorId());
  }

  void scored(String route, long ns) {
    out++;
    nanos += ns;
    for (int i = 0; i < bounds.length; i++) {
      if (ns <= bounds[i]) {
        buckets[i]++;
        break;
      }
    }
    RouteCounts r = route(route);
    r.n++;
    r.sum += ns;
    if (ns < r.min) r.min = ns;
    if (ns > r.max) r.max = ns;
  }

  void failed(String route) {
    dead++;
    if (route != null) route(route).err++;
  }

  void compared(String shadowRoute, boolean scored, boolean agreed, double diff, long ns) {
    ShadowCounts s = shadows.computeIfAbsent(shadowRoute, k -> new ShadowCounts());
    if (!scored) {
      s.err++;
      return;
    }
    s.n++;
    if (agreed) s.agree++;
    s.diff += diff;
    s.sum += ns;
  }

  private RouteCounts route(String key) {
    RouteCounts r = routes.get(key);
    if (r == null) routes.put(key, r = new RouteCounts());
    return r;
  }

  // -- AccumulatorV2 ----------------------------------------------------------------------------

  @Override
  public boolean isZero() {
    return in == 0 && out == 0 && dead == 0 && routes.isEmpty() && shadows.isEmpty() && workers.isEmpty();
  }

  @Override
  public BatchCounts copy() {
    BatchCounts c = new BatchCounts(bounds);
    c.merge(this);
    return c;
  }

  @Override
  public synchronized void reset() {
    in = out = dead = nanos = 0;
    buckets = new long[bounds.length];
    routes = new HashMap<>();
    shadows = new HashMap<>();
    workers = new TreeSet<>();
  }

  @Override
  public void add(Object v) {
    throw new UnsupportedOperationException("BatchCounts is filled by the scorer");
  }

  /**
   * The counts so far, and zero from here on, in one step: a real-time query's batches follow one
   * another with no moment in between for a reset, and Spark merges a task's counts here whenever
   * it ends.
   */
  public synchronized String drain() {
    String v = value();
    reset();
    return v;
  }

  @Override
  public synchronized void merge(AccumulatorV2<Object, String> other) {
    BatchCounts o = (BatchCounts) other;
    in += o.in;
    out += o.out;
    dead += o.dead;
    nanos += o.nanos;
    for (int i = 0; i < buckets.length; i++) buckets[i] += o.buckets[i];
    for (Map.Entry<String, RouteCounts> e : o.routes.entrySet()) route(e.getKey()).merge(e.getValue());
    for (Map.Entry<String, ShadowCounts> e : o.shadows.entrySet()) {
      shadows.computeIfAbsent(e.getKey(), k -> new ShadowCounts()).merge(e.getValue());
    }
    workers.addAll(o.workers);
  }

  /** The counts as JSON; the histogram cumulative (values at or below each bound), as Prometheus has it. */
  @Override
  public synchronized String value() {
    Map<String, Object> v = new LinkedHashMap<>();
    v.put("in", in);
    v.put("out", out);
    v.put("dead", dead);
    v.put("nanos", nanos);
    List<Long> le = new ArrayList<>();
    long running = 0;
    for (long b : buckets) le.add(running += b);
    v.put("le", le);
    Map<String, Object> r = new LinkedHashMap<>();
    for (Map.Entry<String, RouteCounts> e : routes.entrySet()) {
      RouteCounts c = e.getValue();
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("n", c.n);
      m.put("err", c.err);
      m.put("sum", c.sum);
      m.put("min", c.n > 0 ? c.min : null);
      m.put("max", c.n > 0 ? c.max : null);
      r.put(e.getKey(), m);
    }
    v.put("routes", r);
    Map<String, Object> s = new LinkedHashMap<>();
    for (Map.Entry<String, ShadowCounts> e : shadows.entrySet()) {
      ShadowCounts c = e.getValue();
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("n", c.n);
      m.put("err", c.err);
      m.put("agree", c.agree);
      m.put("diff", c.diff);
      m.put("sum", c.sum);
      s.put(e.getKey(), m);
    }
    v.put("shadows", s);
    v.put("workers", new ArrayList<>(workers));
    try {
      return JSON.writeValueAsString(v);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }
}
