package dev.scorestream.jvm;

import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * The query's checkpoint files on a local file system (a driver pod's checkpoint volume), written
 * with java.nio instead of through Hadoop's local file system.
 *
 * <p>Without Hadoop's native library, Hadoop's local file system starts a process ({@code chmod},
 * {@code readlink}) for each permission it sets and each link it looks up: about 20 processes per
 * micro-batch for the offset and commit logs, 60-150 ms of every batch, spent between batches
 * while no record moves. Writes here keep Spark's contract for {@code createAtomic}: the file
 * appears whole or not at all, and unless overwriting is allowed an existing file is never
 * replaced (Spark detects a second writer of the same batch by that). Like Spark's own manager,
 * nothing is synced to disk. Reads, listings and deletes, and every path that is not local, are
 * left to Spark's manager: they start no process.
 */
public final class LocalCheckpointFileManager implements CheckpointFileManager {
  private final CheckpointFileManager spark;
  private final boolean local;

  public LocalCheckpointFileManager(Path path, Configuration conf) {
    this.spark = new FileContextBasedCheckpointFileManager(path, conf);
    String scheme = path.toUri().getScheme();
    if (scheme == null) scheme = FileSystem.getDefaultUri(conf).getScheme();
    this.local = scheme == null || "file".equals(scheme);
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    if (!local) return spark.createAtomic(path, overwriteIfPossible);
    java.nio.file.Path target = Paths.get(path.toUri().getPath());
    java.nio.file.Path temp = target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try {
      Files.createDirectories(target.getParent());
      return new Atomic(Files.newOutputStream(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE),
          temp, target, overwriteIfPossible);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot create " + temp, e);
    }
  }

  /** Written to a temporary file beside the target; moved into place when closed. */
  private static final class Atomic extends CancellableFSDataOutputStream {
    private final java.nio.file.Path temp;
    private final java.nio.file.Path target;
    private final boolean overwrite;
    private boolean done;

    Atomic(OutputStream out, java.nio.file.Path temp, java.nio.file.Path target, boolean overwrite) {
      super(out);
      this.temp = temp;
      this.target = target;
      this.overwrite = overwrite;
    }

    @Override
    public synchronized void close() throws IOException {
      if (done) return;
      done = true;
      try {
        super.close();
        if (overwrite) {
          // A checksum Hadoop wrote for an earlier version of the file would fail its next read.
          Files.deleteIfExists(target.resolveSibling("." + target.getFileName() + ".crc"));
          Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } else {
          publishIfAbsent();
        }
      } finally {
        Files.deleteIfExists(temp);
      }
    }

    /** A hard link fails if the target exists, atomically; where links are not supported, a check then a rename. */
    private void publishIfAbsent() throws IOException {
      try {
        Files.createLink(target, temp);
        return;
      } catch (FileAlreadyExistsException e) {
        throw new org.apache.hadoop.fs.FileAlreadyExistsException(target + " already exists");
      } catch (UnsupportedOperationException | IOException e) {
        // e.g. a volume without hard links: fall through
      }
      if (Files.exists(target)) throw new org.apache.hadoop.fs.FileAlreadyExistsException(target + " already exists");
      Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE);
    }

    @Override
    public synchronized void cancel() {
      if (done) return;
      done = true;
      try {
        super.close();
      } catch (IOException ignored) {
        // cancelled: what was written is discarded below either way
      }
      try {
        Files.deleteIfExists(temp);
      } catch (IOException e) {
        throw new UncheckedIOException("cannot remove " + temp, e);
      }
    }
  }

  @Override
  public FSDataInputStream open(Path path) {
    return spark.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return spark.list(path, filter);
  }

  @Override
  public void mkdirs(Path path) {
    spark.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return spark.exists(path);
  }

  @Override
  public void delete(Path path) {
    spark.delete(path);
  }

  @Override
  public boolean isLocal() {
    return spark.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return spark.createCheckpointDirectory();
  }
}
