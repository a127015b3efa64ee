package dev.scorestream.jvm;

import java.util.Arrays;

/**
 * How far a stream's values moved from a baseline's: bins cut at the baseline's deciles, the
 * population stability index (PSI) and the Kolmogorov–Smirnov statistic (KS) of the two
 * histograms. Pure functions; {@link DriftCounts} counts the histograms as the scorer scores.
 *
 * <p>Bin {@code i} holds the values in {@code (edges[i-1], edges[i]]}, the first everything at or
 * below {@code edges[0]}, the last everything above the last edge: {@code edges.length + 1} bins,
 * so a value outside the baseline's range still lands in a bin (the end ones).
 */
public final class Drift {
  /** Baseline deciles: ten bins, the usual choice for PSI. */
  static final int BINS = 10;
  /**
   * The smallest share a bin counts with in PSI: an empty bin on either side would make the
   * logarithm infinite. 0.0001 is the customary floor (a bin 100 times rarer than 1% reads as
   * that, not as infinitely far).
   */
  static final double FLOOR = 1e-4;

  private Drift() {}

  /**
   * The cut points of {@code bins} equally filled bins of the baseline's values (NaN ignored):
   * its quantiles below its largest value, equal ones merged, so a feature with few distinct
   * values gets one bin per value. A constant baseline gets one cut, at its value. The largest
   * value is no cut: a sample's maximum is exceeded by about one new value in n, and an empty
   * baseline bin would make those read as drift.
   */
  static double[] edges(double[] values, int bins) {
    double[] v = Arrays.stream(values).filter(x -> !Double.isNaN(x)).sorted().toArray();
    if (v.length == 0) return new double[0];
    double max = v[v.length - 1];
    double[] cuts = new double[bins];
    int n = 0;
    for (int i = 1; i < bins; i++) {
      double q = v[(int) Math.ceil((double) i * v.length / bins) - 1];
      if (q < max && (n == 0 || q > cuts[n - 1])) cuts[n++] = q;
    }
    if (n == 0) cuts[n++] = max;
    return Arrays.copyOf(cuts, n);
  }

  /** The bin of {@code x}; -1 for NaN (not counted). */
  static int bin(double[] edges, double x) {
    if (Double.isNaN(x)) return -1;
    int lo = 0, hi = edges.length; // the first edge >= x, or edges.length
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (edges[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  static long[] histogram(double[] edges, double[] values) {
    long[] h = new long[edges.length + 1];
    for (double x : values) {
      int b = bin(edges, x);
      if (b >= 0) h[b]++;
    }
    return h;
  }

  /**
   * PSI = Σ (a_i − e_i) · ln(a_i / e_i) over the bins' shares, each at least {@link #FLOOR}.
   * 0 for equal shares; by the usual reading, below 0.1 stable, 0.1–0.25 moved, above 0.25 shifted.
   * NaN when either side counted nothing.
   */
  public static double psi(long[] expected, long[] actual) {
    long ne = sum(expected), na = sum(actual);
    if (ne == 0 || na == 0) return Double.NaN;
    double psi = 0;
    for (int i = 0; i < expected.length; i++) {
      double e = Math.max((double) expected[i] / ne, FLOOR);
      double a = Math.max((double) actual[i] / na, FLOOR);
      psi += (a - e) * Math.log(a / e);
    }
    return psi;
  }

  /**
   * KS = the largest distance between the two cumulative distributions, read at the bins' edges
   * (the binned statistic: it can only be below the exact one, by at most the mass of one bin).
   * In [0, 1]; NaN when either side counted nothing.
   */
  public static double ks(long[] expected, long[] actual) {
    long ne = sum(expected), na = sum(actual);
    if (ne == 0 || na == 0) return Double.NaN;
    long ce = 0, ca = 0;
    double d = 0;
    for (int i = 0; i < expected.length; i++) {
      ce += expected[i];
      ca += actual[i];
      d = Math.max(d, Math.abs((double) ce / ne - (double) ca / na));
    }
    return d;
  }

  static long sum(long[] h) {
    long n = 0;
    for (long x : h) n += x;
    return n;
  }
}
