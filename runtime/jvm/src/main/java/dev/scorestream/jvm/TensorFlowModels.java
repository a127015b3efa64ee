package dev.scorestream.jvm;

import java.io.File;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.SparkFiles;

/**
 * The TensorFlow models this JVM has loaded, by file: each loaded once and shared by the task
 * threads. A model is used under a {@link Lease}; the least recently used beyond {@link #KEEP}
 * are closed (their native session freed) once no lease holds them, so a swapped-out model goes
 * without pulling its session from under a task still scoring with it.
 */
final class TensorFlowModels {
  /** The serving model and a candidate, or the model a new one is about to replace. */
  static final int KEEP = 3;
  static final TensorFlowModels JVM = new TensorFlowModels();

  private final Map<String, Entry> loaded = new LinkedHashMap<>(16, 0.75f, true);

  private static final class Entry {
    final TensorFlowModel model;
    int leases;
    boolean evicted;

    Entry(TensorFlowModel model) {
      this.model = model;
    }
  }

  /** A model in use: closing the lease, not the model, is the caller's part. */
  final class Lease implements AutoCloseable {
    final TensorFlowModel model;
    private final Entry entry;

    private Lease(Entry entry) {
      this.entry = entry;
      this.model = entry.model;
    }

    @Override
    public void close() {
      release(entry);
    }
  }

  /**
   * The model of {@code file} (a path, or a SparkFiles name), loaded on first use. Loading holds
   * the cache: the other task threads need the same model, or wait for a moment.
   */
  synchronized Lease acquire(String file) throws Exception {
    Entry e = loaded.get(file);
    if (e == null) {
      e = new Entry(TensorFlowModel.load(resolve(file).toPath()));
      loaded.put(file, e);
      evict();
    }
    e.leases++;
    return new Lease(e);
  }

  private static File resolve(String file) {
    File f = new File(file);
    return f.isAbsolute() && f.exists() ? f : new File(SparkFiles.get(file));
  }

  private void evict() throws Exception {
    List<Entry> gone = new ArrayList<>();
    Iterator<Entry> oldest = loaded.values().iterator();
    while (loaded.size() > KEEP && oldest.hasNext()) {
      Entry e = oldest.next();
      oldest.remove();
      e.evicted = true;
      gone.add(e);
    }
    for (Entry e : gone) if (e.leases == 0) e.model.close();
  }

  private synchronized void release(Entry e) {
    e.leases--;
    if (e.evicted && e.leases == 0) {
      try {
        e.model.close();
      } catch (Exception ex) {
        throw new IllegalStateException("closing a swapped-out TensorFlow model", ex);
      }
    }
  }
}
