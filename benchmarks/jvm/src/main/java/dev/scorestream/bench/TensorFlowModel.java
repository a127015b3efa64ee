package dev.scorestream.bench;

import com.fasterxml.jackson.databind.JsonNode;
import dev.scorestream.jvm.RecordFields;
import dev.scorestream.jvm.Records;
import java.util.Base64;
import java.util.Map;

/**
 * A TensorFlow SavedModel from scorestream's JSON descriptor (the SavedModel zipped, and the record
 * fields it takes, in order), loaded and called by scorestream's own code
 * (dev.scorestream.jvm.TensorFlowModel: signature, input, output and their reading are the job's),
 * its record decoded and written up by scorestream's code too (RecordFields, Records), as for PMML.
 *
 * <p>One model call per record: Kafka Streams hands a processor one record at a time, where
 * scorestream calls the model once per batch of records. That difference is the architecture's,
 * and is what the benchmark measures.
 */
final class TensorFlowModel implements ScoringModel {
  private final String route;
  private final dev.scorestream.jvm.TensorFlowModel model;
  private final String[] inputs;
  private final String[] normalized;

  private TensorFlowModel(String route, dev.scorestream.jvm.TensorFlowModel model, String[] inputs) {
    this.route = route;
    this.model = model;
    this.inputs = inputs;
    this.normalized = new String[inputs.length];
    for (int i = 0; i < inputs.length; i++) normalized[i] = RecordFields.normalize(inputs[i]);
  }

  /**
   * {name, version, dataType, format: "tensorflow", inputs: [field...], data: base64 zip of a
   * SavedModel} (ScoringModel.fromDescriptor). A replaced model is not closed: a stream thread may
   * still be in a call on its session, and the benchmark serves one model.
   */
  static TensorFlowModel fromDescriptor(JsonNode d) throws Exception {
    if (d.hasNonNull("graph")) throw new IllegalArgumentException("frozen graphs are not served by this peer");
    String[] inputs = inputNames(d);
    byte[] archive = Base64.getDecoder().decode(d.get("data").asText());
    dev.scorestream.jvm.TensorFlowModel model = dev.scorestream.jvm.TensorFlowModel.savedModel(archive);
    String why = model.check(inputs.length);
    if (why != null) {
      model.close();
      throw new IllegalArgumentException(why);
    }
    return new TensorFlowModel(d.get("name").asText() + ":" + d.get("version").asText(), model, inputs);
  }

  @Override
  public String route() {
    return route;
  }

  @Override
  public byte[] score(Map<String, Object> fields, byte[] key, String topic, int partition, long offset,
      long eventTime) throws Exception {
    double[] row = new double[inputs.length];
    for (int i = 0; i < inputs.length; i++) row[i] = ScoringModel.number(fields, normalized[i], inputs[i]);
    long t0 = System.nanoTime();
    dev.scorestream.jvm.TensorFlowModel.Output out = model.predict(row, 1);
    long nanos = System.nanoTime() - t0;
    String dataType = (String) fields.get(KStreamsPeer.DATA_TYPE_FIELD);
    return Records.prediction(key, topic, partition, offset, eventTime, dataType, route, out.prediction(0),
        out.label(0), out.outputs(0), nanos, -1);
  }

  private static String[] inputNames(JsonNode d) {
    JsonNode inputs = d.path("inputs");
    if (!inputs.isArray() || inputs.isEmpty()) {
      throw new IllegalArgumentException("a TensorFlow descriptor needs its input fields, in order (inputs)");
    }
    String[] names = new String[inputs.size()];
    for (int i = 0; i < names.length; i++) names[i] = inputs.get(i).asText();
    return names;
  }
}
