package dev.scorestream.bench;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Base64;
import java.util.Map;
import dev.scorestream.jvm.PmmlOutputs;
import dev.scorestream.jvm.RecordFields;
import dev.scorestream.jvm.Records;
import org.pmml4s.model.Model;

/**
 * A PMML model from scorestream's JSON descriptor, and one record through it: input decoding, field
 * matching and the output record are scorestream's own code (RecordFields, PmmlOutputs, Records),
 * so the two peers differ in architecture, not in parsing or formatting.
 */
final class PmmlModel implements ScoringModel {
  private final String route;
  private final Model model;
  private final String[] inputs;
  private final String[] normalized;
  private final PmmlOutputs outputs;

  private PmmlModel(String name, String version, Model model) {
    this.route = name + ":" + version;
    this.model = model;
    this.inputs = model.inputNames();
    this.normalized = new String[inputs.length];
    for (int i = 0; i < inputs.length; i++) normalized[i] = RecordFields.normalize(inputs[i]);
    this.outputs = new PmmlOutputs(model);
  }

  /** {name, version, dataType, format: "pmml", data: base64 PMML, ...} (ScoringModel.fromDescriptor) */
  static PmmlModel fromDescriptor(JsonNode d) throws Exception {
    byte[] pmml = Base64.getDecoder().decode(d.get("data").asText());
    return new PmmlModel(d.get("name").asText(), d.get("version").asText(), Model.fromBytes(pmml));
  }

  @Override
  public String route() {
    return route;
  }

  @Override
  public byte[] score(Map<String, Object> fields, byte[] key, String topic, int partition, long offset,
      long eventTime) throws Exception {
    Object[] in = new Object[inputs.length];
    for (int i = 0; i < inputs.length; i++) in[i] = ScoringModel.number(fields, normalized[i], inputs[i]);
    long t0 = System.nanoTime();
    Object[] out = model.predict((Object) in);
    long nanos = System.nanoTime() - t0;

    PmmlOutputs.Prediction p = outputs.read(out);
    if (p == null) throw new IllegalStateException("model produced no prediction");

    return Records.prediction(key, topic, partition, offset, eventTime,
        (String) fields.get(KStreamsPeer.DATA_TYPE_FIELD), route, p.value, p.label, p.outputs, nanos, -1);
  }
}
