package dev.scorestream.jvm;

import java.io.BufferedInputStream;
import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import javax.xml.XMLConstants;
import javax.xml.stream.Location;
import javax.xml.stream.XMLInputFactory;
import javax.xml.stream.XMLStreamConstants;
import javax.xml.stream.XMLStreamException;
import javax.xml.stream.XMLStreamReader;

/**
 * PMML is untrusted input: every file is checked here before PMML4S parses it.
 *
 * <p>PMML4S reads with whatever {@code XMLInputFactory.newFactory()} finds, left at its defaults;
 * on Spark's classpath that is Hadoop's shaded Woodstox, which loads external DTDs and resolves
 * external entities: a PMML could make the driver or an executor fetch a URL, read a local file
 * into the model, or echo part of one in a parse error. So before PMML4S sees a file, it is
 * streamed once through the JDK's own StAX parser, hardened (no DTD support, no external entities,
 * no external access, a resolver that refuses), and refused when it has a DOCTYPE at all, is
 * larger than {@link #MAX_BYTES}, or nests elements deeper than {@link #MAX_DEPTH}.
 *
 * <p>The reasons never quote the file: a parser's own message may (an error-based DTD puts a
 * file's content into it), so only the line and column of a failure are given.
 */
public final class SafeXml {
  /** The largest PMML file accepted, in bytes. */
  public static final long MAX_BYTES = 64L << 20;
  /** The deepest element nesting accepted (the root element is depth 1). */
  public static final int MAX_DEPTH = 512;

  public static final String DOCTYPE_REFUSED =
      "PMML with a DOCTYPE is refused: DTDs and entities are not allowed";
  static final String ENTITY_REFUSED =
      "PMML with an entity reference is refused: DTDs and entities are not allowed";
  static final String TOO_LARGE = "PMML file is larger than the limit of " + (MAX_BYTES >> 20) + " MiB";
  static final String NOT_WELL_FORMED = "PMML is not well-formed XML";

  private SafeXml() {}

  static XMLInputFactory factory() {
    // The JDK's own implementation, not whichever one the classpath offers, so that the
    // settings below mean what they say.
    XMLInputFactory f = XMLInputFactory.newDefaultFactory();
    f.setProperty(XMLInputFactory.SUPPORT_DTD, Boolean.FALSE);
    f.setProperty(XMLInputFactory.IS_SUPPORTING_EXTERNAL_ENTITIES, Boolean.FALSE);
    f.setProperty(XMLInputFactory.IS_REPLACING_ENTITY_REFERENCES, Boolean.FALSE);
    f.setProperty(XMLInputFactory.IS_VALIDATING, Boolean.FALSE);
    f.setProperty(XMLConstants.ACCESS_EXTERNAL_DTD, "");
    f.setXMLResolver((publicId, systemId, baseUri, namespace) -> {
      throw new XMLStreamException("external resources are not allowed");
    });
    return f;
  }

  /** Check a PMML file by path; see {@link #check(File)}. */
  public static void check(String path) {
    check(new File(path));
  }

  /**
   * Throws {@link IllegalArgumentException} with a reason that quotes nothing of the file when
   * the file is not a regular file, is too large, is not well-formed XML, has a DOCTYPE, or nests
   * too deeply.
   */
  public static void check(File file) {
    String problem = problem(file);
    if (problem != null) throw new IllegalArgumentException(problem);
  }

  /**
   * Reads a PMML file once and checks those bytes: what PMML4S then parses ({@code
   * Model.fromBytes}) is what was checked, not the file read a second time, which a writer of the
   * model directory could have replaced in between. Throws as {@link #check(File)} does.
   */
  public static byte[] read(File file) {
    if (!file.isFile()) throw new IllegalArgumentException("PMML file not found or not a regular file");
    byte[] bytes;
    try (InputStream in = new FileInputStream(file)) {
      bytes = in.readNBytes((int) MAX_BYTES + 1); // whatever the file's length said
    } catch (IOException e) {
      throw new IllegalArgumentException("PMML file cannot be read");
    }
    if (bytes.length > MAX_BYTES) throw new IllegalArgumentException(TOO_LARGE);
    String problem = problem(new ByteArrayInputStream(bytes));
    if (problem != null) throw new IllegalArgumentException(problem);
    return bytes;
  }

  /** Why the file is refused, or null. */
  static String problem(File file) {
    if (!file.isFile()) return "PMML file not found or not a regular file";
    if (file.length() > MAX_BYTES) return TOO_LARGE;
    InputStream raw;
    try {
      raw = new BufferedInputStream(new FileInputStream(file), 1 << 16);
    } catch (IOException e) {
      return "PMML file cannot be read";
    }
    return problem(raw);
  }

  /** Why the document is refused, or null; closes the stream. */
  static String problem(InputStream raw) {
    Bounded in = new Bounded(raw);
    XMLStreamReader r = null;
    try (Bounded closing = in) {
      r = factory().createXMLStreamReader(in); // one per check: tasks may check at once
      return scan(r);
    } catch (XMLStreamException e) {
      // Never e.getMessage(): the parser's message may quote the document or a file it read.
      return in.over ? TOO_LARGE : NOT_WELL_FORMED + at(e.getLocation());
    } catch (IOException e) {
      return in.over ? TOO_LARGE : "PMML file cannot be read";
    } catch (RuntimeException e) {
      return in.over ? TOO_LARGE : NOT_WELL_FORMED + at(r == null ? null : safeLocation(r));
    } finally {
      if (r != null) {
        try {
          r.close();
        } catch (XMLStreamException ignored) {
          // the file itself is closed by try-with-resources
        }
      }
    }
  }

  private static String scan(XMLStreamReader r) throws XMLStreamException {
    int depth = 0;
    while (r.hasNext()) {
      switch (r.next()) {
        case XMLStreamConstants.DTD:
          return DOCTYPE_REFUSED + at(r.getLocation());
        case XMLStreamConstants.ENTITY_REFERENCE:
        case XMLStreamConstants.ENTITY_DECLARATION:
        case XMLStreamConstants.NOTATION_DECLARATION:
          return ENTITY_REFUSED + at(r.getLocation());
        case XMLStreamConstants.START_ELEMENT:
          if (++depth > MAX_DEPTH) return "PMML nests elements deeper than " + MAX_DEPTH + " levels" + at(r.getLocation());
          break;
        case XMLStreamConstants.END_ELEMENT:
          depth--;
          break;
        default:
          break;
      }
    }
    return null;
  }

  private static Location safeLocation(XMLStreamReader r) {
    try {
      return r.getLocation();
    } catch (RuntimeException e) {
      return null;
    }
  }

  private static String at(Location l) {
    if (l == null || l.getLineNumber() < 0) return "";
    return " (line " + l.getLineNumber() + ", column " + l.getColumnNumber() + ")";
  }

  /** Counts what is read and stops past {@link #MAX_BYTES}, whatever the file's length said. */
  private static final class Bounded extends FilterInputStream {
    long count;
    boolean over;

    Bounded(InputStream in) {
      super(in);
    }

    private void add(long n) throws IOException {
      if (n > 0) count += n;
      if (count > MAX_BYTES) {
        over = true;
        throw new IOException("over the size limit");
      }
    }

    @Override
    public int read() throws IOException {
      int b = super.read();
      if (b >= 0) add(1);
      return b;
    }

    @Override
    public int read(byte[] buf, int off, int len) throws IOException {
      int n = super.read(buf, off, len);
      add(n);
      return n;
    }

    @Override
    public long skip(long n) throws IOException {
      long k = super.skip(n);
      add(k);
      return k;
    }
  }
}
