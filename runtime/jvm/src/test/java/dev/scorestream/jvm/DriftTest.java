package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Random;
import org.junit.jupiter.api.Test;

class DriftTest {
  private static double[] normal(Random r, int n, double mean) {
    double[] v = new double[n];
    for (int i = 0; i < n; i++) v[i] = mean + r.nextGaussian();
    return v;
  }

  @Test
  void edgesAreTheBaselinesDecilesBelowItsMaximum() {
    double[] v = new double[100];
    for (int i = 0; i < 100; i++) v[i] = i + 1; // 1..100
    assertArrayEquals(new double[] {10, 20, 30, 40, 50, 60, 70, 80, 90}, Drift.edges(v, 10));
    long[] h = Drift.histogram(Drift.edges(v, 10), v);
    assertArrayEquals(new long[] {10, 10, 10, 10, 10, 10, 10, 10, 10, 10}, h);
  }

  @Test
  void fewDistinctValuesGetOneBinEachAndAConstantTwo() {
    assertArrayEquals(new double[] {0, 1}, Drift.edges(new double[] {0, 0, 0, 1, 1, 2, 2, 2, 2, 2}, 10));
    assertArrayEquals(new double[] {7}, Drift.edges(new double[] {7, 7, 7}, 10));
    assertArrayEquals(new double[0], Drift.edges(new double[] {Double.NaN}, 10));
  }

  @Test
  void binsTakeTheirUpperEdgeAndTheEndsTakeEverythingBeyond() {
    double[] e = {1, 2, 3};
    assertEquals(0, Drift.bin(e, -1e300));
    assertEquals(0, Drift.bin(e, 1));
    assertEquals(1, Drift.bin(e, 1.5));
    assertEquals(1, Drift.bin(e, 2));
    assertEquals(3, Drift.bin(e, 3.0001));
    assertEquals(3, Drift.bin(e, Double.POSITIVE_INFINITY));
    assertEquals(-1, Drift.bin(e, Double.NaN));
  }

  @Test
  void psiByHandAndItsFloor() {
    // Shares 0.5/0.5 against 0.25/0.75: (0.25-0.5)ln(0.5) + (0.75-0.5)ln(1.5).
    double want = -0.25 * Math.log(0.5) + 0.25 * Math.log(1.5);
    assertEquals(want, Drift.psi(new long[] {50, 50}, new long[] {25, 75}), 1e-12);
    assertEquals(0.0, Drift.psi(new long[] {3, 7}, new long[] {30, 70}), 1e-12);
    // An empty bin counts as 0.0001, not as infinitely far.
    double floored = (1 - 1e-4) * Math.log(1 / 1e-4) + (1e-4 - 1) * Math.log(1e-4 / 1);
    assertEquals(floored, Drift.psi(new long[] {10, 0}, new long[] {0, 10}), 1e-9);
    assertTrue(Double.isNaN(Drift.psi(new long[] {1, 1}, new long[] {0, 0})));
  }

  @Test
  void ksIsTheLargestGapOfTheCumulativeShares() {
    assertEquals(0.25, Drift.ks(new long[] {50, 50}, new long[] {25, 75}), 1e-12);
    assertEquals(1.0, Drift.ks(new long[] {10, 0, 0}, new long[] {0, 0, 5}), 1e-12);
    assertEquals(0.0, Drift.ks(new long[] {1, 2, 3}, new long[] {2, 4, 6}), 1e-12);
  }

  @Test
  void theSameDistributionStaysLowAShiftedOneRises() {
    Random r = new Random(7);
    double[] base = normal(r, 2000, 0);
    double[] e = Drift.edges(base, Drift.BINS);
    long[] expected = Drift.histogram(e, base);
    long[] same = Drift.histogram(e, normal(r, 20000, 0));
    long[] shifted = Drift.histogram(e, normal(r, 20000, 1));
    assertTrue(Drift.psi(expected, same) < 0.02, "same: " + Drift.psi(expected, same));
    assertTrue(Drift.ks(expected, same) < 0.05, "same: " + Drift.ks(expected, same));
    // A one-sigma shift: KS of two unit normals a sigma apart is 2Φ(0.5)-1 = 0.383.
    assertTrue(Drift.psi(expected, shifted) > 0.5, "shifted: " + Drift.psi(expected, shifted));
    assertEquals(0.383, Drift.ks(expected, shifted), 0.05);
  }

  @Test
  void countsMergeAsSparkMergesTasksAndReportPerRoute() throws Exception {
    Random r = new Random(11);
    DriftCounts driver = new DriftCounts();
    double[] x = normal(r, 1000, 0);
    double[] y = new double[1000];
    for (int i = 0; i < y.length; i++) y[i] = 2 * x[i];
    driver.baseline("tree:1", new String[] {"x"}, new double[][] {x, y});
    assertTrue(driver.isZero());

    // Two tasks' copies (as Spark makes them): the baseline travels, the counts start empty.
    DriftCounts a = (DriftCounts) driver.copyAndReset(), b = (DriftCounts) driver.copyAndReset();
    assertTrue(a.isZero());
    for (int i = 0; i < 500; i++) {
      double v = r.nextGaussian() + 3; // shifted features and predictions
      (i % 2 == 0 ? a : b).observe("tree:1", new double[] {v}, 2 * v);
    }
    a.observe("unknown:9", new double[] {1}, 1.0); // no baseline: not counted
    driver.merge(a);
    driver.merge(b);
    JsonNode v = new ObjectMapper().readTree(driver.value());
    JsonNode tree = v.get("tree:1");
    assertEquals(500, tree.get("records").asLong());
    assertEquals(1000, tree.get("baselineRecords").asLong());
    assertTrue(tree.get("prediction").get("psi").asDouble() > 1, tree.toString());
    // Binned, KS reads at most 0.9 here: a shift past the top decile all lands in its bin.
    assertTrue(tree.get("features").get("x").get("ks").asDouble() > 0.8, tree.toString());
    assertNull(v.get("unknown:9"));
    // Merged counts equal one copy counting everything.
    DriftCounts one = (DriftCounts) driver.copyAndReset();
    one.merge(a);
    one.merge(b);
    assertEquals(driver.value(), one.value());
  }

  @Test
  void aModelWithABaselineButNoRecordsYetHasNoFigures() throws Exception {
    DriftCounts d = new DriftCounts();
    d.baseline("tree:1", new String[] {"x"}, new double[][] {{1, 2, 3}, {1, 2, 3}});
    JsonNode tree = new ObjectMapper().readTree(d.value()).get("tree:1");
    assertEquals(0, tree.get("records").asLong());
    assertTrue(tree.get("prediction").get("psi").isNull());
  }
}
