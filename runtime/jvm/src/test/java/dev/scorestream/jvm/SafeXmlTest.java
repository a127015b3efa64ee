package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SafeXmlTest {
  @TempDir Path dir;

  private File file(String xml) throws IOException {
    Path p = Files.createTempFile(dir, "model", ".pmml");
    Files.writeString(p, xml, StandardCharsets.UTF_8);
    return p.toFile();
  }

  @Test
  void aPlainDocumentPasses() throws IOException {
    assertNull(SafeXml.problem(file("<?xml version=\"1.0\"?><PMML version=\"4.4\"><Header/></PMML>")));
  }

  @Test
  void aDoctypeIsRefused() throws IOException {
    assertTrue(SafeXml.problem(file("<!DOCTYPE PMML []><PMML/>")).startsWith(SafeXml.DOCTYPE_REFUSED));
  }

  @Test
  void anExternalEntityIsRefusedWithoutQuotingTheFileItNames() throws IOException {
    Path secret = dir.resolve("secret.txt");
    Files.writeString(secret, "top-secret-content");
    String xml = "<!DOCTYPE PMML [<!ENTITY x SYSTEM \"" + secret.toUri() + "\">]><PMML>&x;</PMML>";
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> SafeXml.check(file(xml)));
    assertFalse(e.getMessage().contains("top-secret"), e.getMessage());
    assertFalse(e.getMessage().contains(secret.toString()), e.getMessage());
  }

  @Test
  void anUndeclaredEntityReferenceIsRefused() throws IOException {
    String problem = SafeXml.problem(file("<PMML>&x;</PMML>"));
    assertTrue(problem.startsWith(SafeXml.ENTITY_REFUSED) || problem.startsWith(SafeXml.NOT_WELL_FORMED), problem);
  }

  @Test
  void notWellFormedSaysWhereButNotWhat() throws IOException {
    String problem = SafeXml.problem(file("<PMML>\n<Header secret-value-here></PMML>"));
    assertTrue(problem.startsWith(SafeXml.NOT_WELL_FORMED), problem);
    assertFalse(problem.contains("secret-value-here"), problem);
  }

  @Test
  void nestingDeeperThanTheLimitIsRefused() throws IOException {
    String ok = "<a>".repeat(SafeXml.MAX_DEPTH) + "</a>".repeat(SafeXml.MAX_DEPTH);
    assertNull(SafeXml.problem(file(ok)));
    int deep = SafeXml.MAX_DEPTH + 1;
    String problem = SafeXml.problem(file("<a>".repeat(deep) + "</a>".repeat(deep)));
    assertTrue(problem != null && problem.contains(Integer.toString(SafeXml.MAX_DEPTH)), problem);
  }

  @Test
  void aFileLargerThanTheLimitIsRefusedBeforeParsing() throws IOException {
    File big = dir.resolve("big.pmml").toFile();
    try (RandomAccessFile f = new RandomAccessFile(big, "rw")) {
      f.setLength(SafeXml.MAX_BYTES + 1); // sparse: no 64 MiB written
    }
    assertEquals(SafeXml.TOO_LARGE, SafeXml.problem(big));
  }

  @Test
  void aMissingFileOrADirectoryIsRefused() {
    assertThrows(IllegalArgumentException.class, () -> SafeXml.check(dir.resolve("absent.pmml").toString()));
    assertTrue(SafeXml.problem(dir.toFile()).contains("not a regular file"));
  }
}
