package dev.scorestream.jvm;

import java.util.Arrays;
import java.util.List;
import org.apache.spark.SparkContext;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Live executor changes through Spark's ExecutorAllocationClient (standalone, Kubernetes, YARN):
 * the serving job's driver calls these from Python, where building Scala collections over Py4J is
 * clumsy. Spark's scheduler backend asks the cluster manager for more executors, or kills the
 * given ones; the streaming query keeps running.
 */
public final class Executors {
  private Executors() {}

  /** The ids of the executors registered now (the driver's own block manager excluded). */
  public static String[] ids(SparkContext sc) {
    List<String> ids = CollectionConverters.asJava(sc.getExecutorIds());
    String[] out = ids.toArray(new String[0]);
    Arrays.sort(out);
    return out;
  }

  /** Ask the cluster manager for this many executors in total; false where it cannot. */
  public static boolean requestTotal(SparkContext sc, int total) {
    return sc.requestTotalExecutors(total, 0, scala.collection.immutable.Map$.MODULE$.<String, Object>empty());
  }

  /** Kill these executors (ids separated by commas) and lower the target by as many. */
  public static boolean kill(SparkContext sc, String executorIds) {
    return sc.killExecutors(CollectionConverters.asScala(Arrays.asList(executorIds.split(","))).toSeq());
  }
}
