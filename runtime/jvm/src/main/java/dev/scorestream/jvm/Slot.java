package dev.scorestream.jvm;

import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataType;

/**
 * One model's result for one record: the serving (or canary) model's, or a shadow's. A
 * micro-batch's TensorFlow slot is carried as a row ({@link #DDL}) with its features, from the
 * scorer to the stage that scores many such rows a call ({@link Scorer#tensorFlow}).
 */
final class Slot {
  static final String DDL =
      "route STRING, tf BOOLEAN, features ARRAY<DOUBLE>, prediction DOUBLE, label STRING, "
          + "outputs MAP<STRING, DOUBLE>, nanos BIGINT, stage STRING, error STRING";
  static final DataType TYPE = DataType.fromDDL(DDL);

  final String route; // name:version
  final boolean tf; // scored by TensorFlow, many records a call
  double[] features;
  Double prediction;
  String label;
  Map<String, Double> outputs;
  long nanos;
  String stage; // the failing stage: decode, route, validate, score
  String error;
  // PMML4S's output row (PMML slots only, never sent to Spark): what model verification compares
  // by output name, strings included.
  Object[] raw;

  Slot(String route, boolean tf) {
    this.route = route;
    this.tf = tf;
  }

  static Slot failure(String route, String stage, String error) {
    Slot s = new Slot(route, false);
    s.stage = stage;
    s.error = error;
    return s;
  }

  boolean failed() {
    return error != null;
  }

  /** Scored already, or failed: nothing left for TensorFlow to do. */
  boolean done() {
    return !tf || failed() || prediction != null || label != null;
  }

  Row toRow() {
    return RowFactory.create(route, tf, features, prediction, label, outputs, nanos, stage, error);
  }

  static Slot fromRow(Row r) {
    if (r == null || r.isNullAt(0)) return null;
    Slot s = new Slot(r.getString(0), !r.isNullAt(1) && r.getBoolean(1));
    if (!r.isNullAt(2)) {
      List<Double> f = r.getList(2);
      s.features = new double[f.size()];
      for (int i = 0; i < s.features.length; i++) s.features[i] = f.get(i);
    }
    s.prediction = r.isNullAt(3) ? null : r.getDouble(3);
    s.label = r.isNullAt(4) ? null : r.getString(4);
    s.outputs = r.isNullAt(5) ? null : r.<String, Double>getJavaMap(5);
    s.nanos = r.isNullAt(6) ? 0 : r.getLong(6);
    s.stage = r.isNullAt(7) ? null : r.getString(7);
    s.error = r.isNullAt(8) ? null : r.getString(8);
    return s;
  }
}
