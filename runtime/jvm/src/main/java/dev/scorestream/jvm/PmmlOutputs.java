package dev.scorestream.jvm;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.pmml4s.metadata.OutputField;
import org.pmml4s.model.Model;

/**
 * What a PMML4S output row predicts: the predicted value, or the most probable class when the
 * model gives only probabilities. Needs nothing of Spark, so the benchmark's Kafka Streams peer
 * reads predictions with this very code.
 */
public final class PmmlOutputs {
  private final String[] names;
  private final int predicted; // index of the predictedValue output, or -1
  private final int[] probability; // indexes of probability(x) outputs
  private final String[] probabilityLabel;

  /** One record's prediction; {@code outputs} holds every numeric output, NaN as null. */
  public static final class Prediction {
    public final Double value;
    public final String label;
    public final Map<String, Double> outputs;

    Prediction(Double value, String label, Map<String, Double> outputs) {
      this.value = value;
      this.label = label;
      this.outputs = outputs;
    }
  }

  public PmmlOutputs(Model model) {
    names = model.outputNames();
    int p = -1;
    List<Integer> prob = new ArrayList<>();
    List<String> labels = new ArrayList<>();
    OutputField[] fields = model.outputFields();
    for (int i = 0; i < fields.length; i++) {
      String feature = fields[i].feature().toString();
      if (feature.equals("predictedValue") && p < 0) p = i;
      if (feature.equals("probability") && fields[i].value().isDefined()) {
        prob.add(i);
        labels.add(String.valueOf(fields[i].value().get()));
      }
    }
    predicted = p;
    probability = prob.stream().mapToInt(Integer::intValue).toArray();
    probabilityLabel = labels.toArray(new String[0]);
  }

  /** The prediction of PMML4S's output row, or null when it predicts nothing. */
  public Prediction read(Object[] out) {
    Map<String, Double> outputs = new LinkedHashMap<>();
    String label = null;
    for (int i = 0; i < out.length; i++) {
      Object o = out[i];
      if (o instanceof Number) {
        double d = ((Number) o).doubleValue();
        outputs.put(names[i], Double.isNaN(d) ? null : d);
      } else if (o != null && i == predicted) {
        label = o.toString();
      }
    }
    Double value = null;
    if (predicted >= 0 && out[predicted] instanceof Number) {
      value = ((Number) out[predicted]).doubleValue();
    } else {
      if (label == null && probability.length > 0) {
        double best = Double.NEGATIVE_INFINITY;
        for (int j = 0; j < probability.length; j++) {
          Object o = out[probability[j]];
          if (o instanceof Number && ((Number) o).doubleValue() > best) {
            best = ((Number) o).doubleValue();
            label = probabilityLabel[j];
          }
        }
      }
      if (label != null) {
        try {
          value = Double.parseDouble(label);
        } catch (NumberFormatException ignored) {
          // a non-numeric class label: reported in `label` only
        }
      }
    }
    return value == null && label == null ? null : new Prediction(value, label, outputs);
  }
}
