package dev.scorestream.jvm;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryUsage;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.status.api.v1.ExecutorSummary;

/**
 * The driver's JVM (heap, GC, threads) and every executor's as Spark's status store knows them
 * (from the executors' heartbeats: storage memory, GC time, tasks, peak JVM heap), in one call
 * from the job's /metrics: JSON of the shape {@code scorestream.runtime.jvm_metrics.JvmSnapshot}.
 *
 * <p>The status store is the one behind Spark's UI and its PrometheusServlet; it is kept whether
 * or not the UI is on, so the job's own metrics port carries these without opening the UI.
 */
public final class JvmMetrics {
  private static final ObjectMapper JSON = new ObjectMapper();

  private JvmMetrics() {}

  public static String snapshot(SparkContext sc) {
    Map<String, Object> out = new LinkedHashMap<>();
    var memory = ManagementFactory.getMemoryMXBean();
    out.put("heap", usage(memory.getHeapMemoryUsage()));
    out.put("nonHeap", usage(memory.getNonHeapMemoryUsage()));
    List<Map<String, Object>> gcs = new ArrayList<>();
    for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
      Map<String, Object> g = new LinkedHashMap<>();
      g.put("name", gc.getName());
      g.put("collections", Math.max(0, gc.getCollectionCount()));
      g.put("seconds", Math.max(0, gc.getCollectionTime()) / 1000.0);
      gcs.add(g);
    }
    out.put("gc", gcs);
    ThreadMXBean threads = ManagementFactory.getThreadMXBean();
    out.put("threads", threads.getThreadCount());
    out.put("daemonThreads", threads.getDaemonThreadCount());
    out.put("peakThreads", threads.getPeakThreadCount());
    List<Map<String, Object>> executors = new ArrayList<>();
    if (sc != null && !sc.isStopped()) {
      for (ExecutorSummary e : scala.jdk.javaapi.CollectionConverters.asJava(sc.statusStore().executorList(true))) {
        Map<String, Object> x = new LinkedHashMap<>();
        x.put("id", e.id());
        x.put("storageMemoryUsedBytes", e.memoryUsed());
        x.put("storageMemoryMaxBytes", e.maxMemory());
        x.put("gcSeconds", e.totalGCTime() / 1000.0);
        x.put("activeTasks", e.activeTasks());
        x.put("completedTasks", e.completedTasks());
        x.put("failedTasks", e.failedTasks());
        ExecutorMetrics peak = e.peakMemoryMetrics().isDefined() ? e.peakMemoryMetrics().get() : null;
        x.put("peakHeapBytes", peak == null ? null : peak.getMetricValue("JVMHeapMemory"));
        executors.add(x);
      }
    }
    out.put("executors", executors);
    try {
      return JSON.writeValueAsString(out);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  private static Map<String, Object> usage(MemoryUsage u) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("used", u.getUsed());
    m.put("committed", u.getCommitted());
    m.put("max", u.getMax() < 0 ? null : u.getMax()); // -1: undefined
    return m;
  }
}
