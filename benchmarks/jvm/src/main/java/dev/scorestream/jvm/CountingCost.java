package dev.scorestream.jvm;

import java.util.Map;

/**
 * What the serving statistics cost per record: the counting the scorer does (BatchCounts) and its
 * drift histograms (DriftCounts: every input and the prediction binned against a baseline) next to
 * the rest of its per-record work (decode, PMML4S, the prediction record), in one JVM, warm.
 * In the scorer's package because the counting calls are package-private.
 */
public final class CountingCost {
  public static void main(String[] args) throws Exception {
    String pmml = args[0];
    byte[] record = args[1].getBytes(java.nio.charset.StandardCharsets.UTF_8);
    int n = Integer.parseInt(args[2]);
    Scorer.Pmml model = Scorer.Pmml.load(pmml);
    String[] inputs = model.model.inputNames();
    Records.Source src = new Records.Source("k-1".getBytes(), "data", 0, 1L, System.currentTimeMillis());
    BatchCounts counts = new BatchCounts("1000,5000,10000,50000,100000,500000,1000000");
    // A baseline of 200 values per input and for the prediction, around the record's: ten bins each.
    Map<String, Object> fields = RecordFields.decodeJson(record);
    double[] features = new double[inputs.length];
    for (int j = 0; j < inputs.length; j++) features[j] = (Double) fields.get(RecordFields.normalize(inputs[j]));
    double[][] columns = new double[inputs.length + 1][200];
    for (int j = 0; j <= inputs.length; j++) {
      for (int k = 0; k < 200; k++) columns[j][k] = (j < inputs.length ? features[j] : 5.0) * (0.5 + k / 200.0);
    }
    DriftCounts drift = new DriftCounts();
    drift.baseline("tree:1", inputs, columns);
    long sink = 0;
    for (int rep = 0; rep < 4; rep++) {
      long t0 = System.nanoTime();
      for (int i = 0; i < n; i++) {
        Map<String, Object> f = RecordFields.decodeJson(record);
        Object[] in = new Object[inputs.length];
        for (int j = 0; j < in.length; j++) in[j] = f.get(RecordFields.normalize(inputs[j]));
        Object[] out = model.model.predict((Object) in);
        Slot s = model.result("tree:1", out, 1000);
        sink += Records.prediction(src, "wine", s, 1).length;
      }
      long work = System.nanoTime() - t0;
      t0 = System.nanoTime();
      for (int i = 0; i < n; i++) {
        counts.received();
        counts.scored("tree:1", 1000 + (i & 1023));
      }
      long counting = System.nanoTime() - t0;
      t0 = System.nanoTime();
      for (int i = 0; i < n; i++) drift.observe("tree:1", features, 3.0 + (i & 7));
      long drifting = System.nanoTime() - t0;
      if (rep == 3) {
        System.out.printf("%.0f %.1f %.1f%n", (double) work / n, (double) counting / n, (double) drifting / n);
      }
    }
    // Keep the work from being optimised away.
    if (sink == 42) System.out.println(counts.value() + drift.value());
  }
}
