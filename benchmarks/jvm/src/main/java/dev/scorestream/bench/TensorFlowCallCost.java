package dev.scorestream.bench;

import dev.scorestream.jvm.TensorFlowModel;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * What one TensorFlow Java call costs per record, by how many records it takes: the job's
 * TensorFlowModel (dev.scorestream.jvm) on a SavedModel zip, called on batches of 1, 16, 256 and
 * 4,096 rows of the given features (a CSV of numbers, one row a line), in one warm JVM; CPU of the
 * whole process (TensorFlow's own threads included) per record, the output read as the job reads
 * it. Prints one line per batch size: {@code rows cpu_us_per_record wall_us_per_record}.
 */
public final class TensorFlowCallCost {
  public static void main(String[] args) throws Exception {
    byte[] zip = Files.readAllBytes(Path.of(args[0]));
    List<String> lines = Files.readAllLines(Path.of(args[1]));
    int records = Integer.parseInt(args[2]);
    double[][] rows = new double[lines.size()][];
    for (int i = 0; i < rows.length; i++) {
      String[] cells = lines.get(i).split(",");
      rows[i] = new double[cells.length];
      for (int j = 0; j < cells.length; j++) rows[i][j] = Double.parseDouble(cells[j]);
    }
    int width = rows[0].length;
    var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    double sink = 0;
    try (TensorFlowModel model = TensorFlowModel.savedModel(zip)) {
      for (int size : new int[] {1, 16, 256, 4096}) {
        double[] flat = new double[size * width];
        for (int rep = 0; rep < 3; rep++) {
          int calls = Math.max(1, records / size);
          long cpu0 = os.getProcessCpuTime(), t0 = System.nanoTime();
          for (int c = 0; c < calls; c++) {
            for (int r = 0; r < size; r++) System.arraycopy(rows[(c * size + r) % rows.length], 0, flat, r * width, width);
            TensorFlowModel.Output out = model.predict(flat, size);
            for (int r = 0; r < size; r++) sink += out.prediction(r) + out.outputs(r).size();
          }
          long n = (long) calls * size;
          if (rep == 2) {
            System.out.printf("%d %.2f %.2f%n", size, (os.getProcessCpuTime() - cpu0) / 1e3 / n,
                (System.nanoTime() - t0) / 1e3 / n);
          }
        }
      }
    }
    if (sink == 42) System.out.println(sink); // keeps the work from being optimised away
  }
}
