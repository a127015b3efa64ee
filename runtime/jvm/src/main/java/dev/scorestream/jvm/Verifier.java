package dev.scorestream.jvm;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import javax.xml.stream.XMLStreamConstants;
import javax.xml.stream.XMLStreamReader;

/**
 * Scores a model's verification records before it may serve, with the scorer's own code: the
 * record's fields go through {@link Scorer#evaluate(Scorer.Route, Map, Scorer.Pmml)} exactly as
 * a served record does (same feature checks, same PMML4S call, same {@link PmmlOutputs}).
 *
 * <p>A TensorFlow model is loaded and checked against its inputs here ({@link TensorFlowModel#check}:
 * why it cannot serve is the answer's {@code reason}), and its sample scored in calls of many
 * records, as a micro-batch scores them ({@link Scorer#predict}).
 *
 * <p>Two sets of records: the PMML's own {@code <ModelVerification>} (inputs and expected outputs
 * per row, read here with {@link SafeXml}'s hardened parser, since PMML4S parses the element but
 * keeps none of it), and a sample of JSON records in the input format. This class only scores
 * and reports what came out; {@code scorestream.runtime.verification} compares and decides, so
 * the job and {@code scorestream verify} judge alike. The answer's shape is
 * {@code scorestream.api.verification.JvmAnswer}.
 *
 * <p>Called by the driver over Py4J ({@link #run(String)}), and by {@code scorestream verify} as
 * a process ({@link #main(String[])}: request on stdin, answer on stdout).
 */
public final class Verifier {
  private Verifier() {}

  private static final ObjectMapper MAPPER =
      new ObjectMapper()
          .enable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
          // NaN is an outcome to report, so it is written as JSON's NaN token (Python reads it).
          .configure(JsonGenerator.Feature.QUOTE_NON_NUMERIC_NUMBERS, false);

  /** What the driver asks (``scorestream.api.verification.JvmRequest``). */
  public static final class Request {
    public String model; // a PMML file, or a TensorFlow model's archive (TensorFlowModel.load)
    public String format = "pmml"; // pmml | tensorflow
    public List<String> inputs; // a TensorFlow model's inputs, in order
    public List<String> sample = new ArrayList<>(); // JSON records, as the data topic carries them
    public long timeoutMillis = 10_000;
    // Where to write the answer instead of returning it. Py4J sends a long string in several
    // small writes, and Nagle's algorithm against Python's delayed ACK then stalls it ~40 ms
    // (measured: 5 ms in the JVM, 50 ms round trip for a 10 kB answer); a file is read at once.
    public String answerFile;
  }

  /** The answer as JSON, or "" once it is written to the request's {@code answerFile}. */
  public static String run(String requestJson) throws Exception {
    Request req = MAPPER.readValue(requestJson, Request.class);
    Map<String, Object> answer = verify(req);
    if (req.answerFile == null) return MAPPER.writeValueAsString(answer);
    MAPPER.writeValue(new File(req.answerFile), answer);
    return "";
  }

  public static void main(String[] args) throws Exception {
    byte[] in = System.in.readAllBytes();
    String answer = run(new String(in, StandardCharsets.UTF_8));
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    out.println(answer);
  }

  static Map<String, Object> verify(Request req) throws Exception {
    long started = System.nanoTime();
    long deadline = started + req.timeoutMillis * 1_000_000L;
    Map<String, Object> answer = new LinkedHashMap<>();
    Scorer.Pmml pmml = null;
    List<String> inputs = req.inputs;
    if ("tensorflow".equals(req.format)) return tensorFlow(req, answer, started, deadline);
    if (req.model != null) {
      pmml = Scorer.Pmml.load(req.model); // SafeXml first, as for serving
      inputs = Arrays.asList(pmml.model.inputNames());
      answer.put("outputs", Arrays.asList(pmml.model.outputNames()));
      answer.put("target", pmml.model.targetName());
      answer.put("classification", pmml.model.isClassification());
    }
    if (inputs == null) throw new IllegalArgumentException("a request without a model needs its inputs");
    answer.put("inputs", inputs);
    RoutingTable.Route r = new RoutingTable.Route();
    r.key = "verification";
    r.format = pmml != null ? "pmml" : "tensorflow";
    r.file = req.model;
    r.inputs = inputs;
    Scorer.Route route = new Scorer.Route(r);
    boolean timedOut = false;

    if (pmml != null) {
      Map<String, Object> embedded = embedded(new File(req.model));
      if (embedded != null) {
        List<Map<String, Object>> results = new ArrayList<>();
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> fields = (List<Map<String, Object>>) embedded.get("fields");
        @SuppressWarnings("unchecked")
        List<Map<String, String>> rows = (List<Map<String, String>>) embedded.get("rows");
        for (Map<String, String> row : rows) {
          if (System.nanoTime() > deadline) {
            timedOut = true;
            break;
          }
          results.add(outcome(Scorer.evaluate(route, inputsOf(row, fields, inputs), pmml), pmml));
        }
        embedded.put("results", results);
      }
      answer.put("embedded", embedded);
    }

    List<Map<String, Object>> sample = new ArrayList<>();
    for (String record : req.sample) {
      if (timedOut || System.nanoTime() > deadline) {
        timedOut = true;
        break;
      }
      Map<String, Object> fields;
      try {
        fields = RecordFields.decodeJson(record.getBytes(StandardCharsets.UTF_8));
      } catch (Exception e) {
        sample.add(outcome(Slot.failure(r.key, "decode", String.valueOf(e.getMessage())), pmml));
        continue;
      }
      sample.add(outcome(Scorer.evaluate(route, fields, pmml), pmml));
    }
    answer.put("sample", sample);
    answer.put("timedOut", timedOut);
    answer.put("millis", (System.nanoTime() - started) / 1e6);
    return answer;
  }

  /** A TensorFlow model's answer: why it cannot serve (null: it can), and its sample scored. */
  private static Map<String, Object> tensorFlow(Request req, Map<String, Object> answer, long started, long deadline) {
    if (req.inputs == null) throw new IllegalArgumentException("a TensorFlow model's request needs its inputs");
    answer.put("inputs", req.inputs);
    RoutingTable.Route r = new RoutingTable.Route();
    r.key = "verification";
    r.format = "tensorflow";
    r.file = req.model;
    r.inputs = req.inputs;
    Scorer.Route route = new Scorer.Route(r);
    List<Slot> slots = new ArrayList<>();
    boolean timedOut = false;
    try (TensorFlowModel model = TensorFlowModel.load(java.nio.file.Path.of(req.model))) {
      String reason = model.check(req.inputs.size());
      answer.put("reason", reason);
      if (reason == null) {
        for (String record : req.sample) {
          if (System.nanoTime() > deadline) {
            timedOut = true;
            break;
          }
          Slot s;
          try {
            s = Scorer.evaluate(route, RecordFields.decodeJson(record.getBytes(StandardCharsets.UTF_8)));
          } catch (Exception e) {
            s = Slot.failure(r.key, "decode", String.valueOf(e.getMessage()));
          }
          slots.add(s);
        }
        Scorer.predictWaiting(model, req.inputs.size(), slots);
      }
    } catch (Exception e) { // the archive, the graph or the SavedModel: TensorFlow cannot load it
      answer.put("reason", "tensorflow model does not load: " + TensorFlowModel.describe(e));
    }
    List<Map<String, Object>> sample = new ArrayList<>();
    for (Slot s : slots) sample.add(outcome(s, null));
    answer.put("sample", sample);
    answer.put("timedOut", timedOut || System.nanoTime() > deadline);
    answer.put("millis", (System.nanoTime() - started) / 1e6);
    return answer;
  }

  /** A verification row's inputs as the scorer reads a record's fields: normalised names, numbers as Double. */
  private static Map<String, Object> inputsOf(Map<String, String> row, List<Map<String, Object>> fields, List<String> inputs) {
    Map<String, Object> out = new HashMap<>();
    for (Map<String, Object> f : fields) {
      String field = (String) f.get("field");
      if (!inputs.contains(field)) continue;
      String text = row.get((String) f.get("column"));
      if (text == null || text.isEmpty()) continue; // missing: the scorer says so, as for a record
      Object value;
      try {
        value = Double.parseDouble(text.trim());
      } catch (NumberFormatException e) {
        value = text; // the scorer refuses it as "not a number", as it would a record's
      }
      out.put(RecordFields.normalize(field), value);
    }
    return out;
  }

  private static Map<String, Object> outcome(Slot s, Scorer.Pmml pmml) {
    Map<String, Object> o = new LinkedHashMap<>();
    o.put("prediction", s.prediction);
    o.put("label", s.label);
    o.put("outputs", s.outputs);
    if (s.raw != null && pmml != null) {
      String[] names = pmml.model.outputNames();
      Map<String, Object> values = new LinkedHashMap<>();
      for (int i = 0; i < names.length && i < s.raw.length; i++) {
        Object v = s.raw[i];
        values.put(names[i], v == null || v instanceof Number || v instanceof String ? v : String.valueOf(v));
      }
      o.put("values", values);
    }
    o.put("features", s.features);
    o.put("stage", s.stage);
    o.put("error", s.error);
    return o;
  }

  /**
   * The top-level model's {@code <ModelVerification>}: its fields (with the PMML defaults for
   * precision, 1E-6, and zeroThreshold, 1E-16) and its rows as column -> text; null without one.
   */
  static Map<String, Object> embedded(File file) throws Exception {
    try (InputStream in = new BufferedInputStream(new FileInputStream(file), 1 << 16)) {
      XMLStreamReader x = SafeXml.factory().createXMLStreamReader(in);
      try {
        int depth = 0;
        boolean inside = false; // within PMML > model > ModelVerification
        String section = null; // VerificationFields | InlineTable
        Map<String, Object> found = null;
        List<Map<String, Object>> fields = new ArrayList<>();
        List<Map<String, String>> rows = new ArrayList<>();
        Map<String, String> row = null;
        String cell = null;
        StringBuilder text = new StringBuilder();
        while (x.hasNext()) {
          int ev = x.next();
          if (ev == XMLStreamConstants.START_ELEMENT) {
            depth++;
            String name = x.getLocalName();
            if (depth == 3 && name.equals("ModelVerification") && found == null) {
              inside = true;
              found = new LinkedHashMap<>();
              found.put("recordCount", x.getAttributeValue(null, "recordCount"));
            } else if (inside && depth == 4) {
              section = name;
              if (name.equals("TableLocator")) found.put("tableLocator", true);
            } else if (inside && depth == 5 && "VerificationFields".equals(section) && name.equals("VerificationField")) {
              Map<String, Object> f = new LinkedHashMap<>();
              String field = x.getAttributeValue(null, "field");
              String column = x.getAttributeValue(null, "column");
              f.put("field", field);
              f.put("column", column != null ? column : field);
              f.put("precision", number(x.getAttributeValue(null, "precision"), 1e-6));
              f.put("zeroThreshold", number(x.getAttributeValue(null, "zeroThreshold"), 1e-16));
              fields.add(f);
            } else if (inside && depth == 5 && "InlineTable".equals(section) && name.equals("row")) {
              row = new HashMap<>();
            } else if (row != null && depth == 6) {
              cell = name;
              text.setLength(0);
            }
          } else if (ev == XMLStreamConstants.CHARACTERS || ev == XMLStreamConstants.CDATA) {
            if (cell != null) text.append(x.getText());
          } else if (ev == XMLStreamConstants.END_ELEMENT) {
            if (cell != null && depth == 6) {
              row.put(cell, text.toString().trim());
              cell = null;
            } else if (row != null && depth == 5) {
              rows.add(row);
              row = null;
            } else if (inside && depth == 4) {
              section = null;
            } else if (inside && depth == 3) {
              inside = false;
            }
            depth--;
          }
        }
        if (found == null) return null;
        found.put("fields", fields);
        found.put("rows", rows);
        return found;
      } finally {
        x.close();
      }
    }
  }

  private static double number(String s, double fallback) {
    if (s == null || s.isEmpty()) return fallback;
    return Double.parseDouble(s.trim());
  }
}
