package dev.scorestream.jvm;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.tensorflow.proto.AttrValue;
import org.tensorflow.proto.GraphDef;
import org.tensorflow.proto.NodeDef;
import org.tensorflow.proto.TensorShapeProto;

/**
 * What a frozen GraphDef does not say of itself: which tensors are its input and output (when the
 * descriptor names neither), and how many features its input takes when its Placeholder has no
 * shape (what TensorFlow's {@code optimize_for_inference} writes) or leaves the width unknown.
 * Ambiguity is a reason, never a guess.
 */
final class FrozenGraphs {
  private FrozenGraphs() {}

  /** Ops that are no model output even when nothing reads them. */
  private static final Set<String> NOT_SINKS = Set.of("NoOp", "Placeholder", "Const", "Assert", "SaveV2", "RestoreV2");
  /** Ops whose output has their input's shape: the width is read past them. */
  private static final Set<String> PASS_THROUGH = Set.of("Identity", "Cast", "StopGradient", "Snapshot",
      "CheckNumerics", "PreventGradient", "Relu", "Relu6", "Sigmoid", "Tanh", "Neg", "Abs", "Sqrt", "Rsqrt",
      "Square", "Exp", "Log");
  /**
   * Element-wise ops (a normalisation before the first layer): a constant operand of shape (n,) or
   * (1, n) broadcast against the input says n, and the result keeps the input's shape.
   */
  private static final Set<String> ELEMENTWISE = Set.of("Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum",
      "Minimum", "BiasAdd", "SquaredDifference");
  /** A matrix product's (transpose input, transpose weight) attributes. */
  private static final Map<String, String[]> MATMUL = Map.of("MatMul", new String[] {"transpose_a", "transpose_b"},
      "BatchMatMul", new String[] {"adj_x", "adj_y"}, "BatchMatMulV2", new String[] {"adj_x", "adj_y"},
      "BatchMatMulV3", new String[] {"adj_x", "adj_y"});

  /** {@code name:0} for an op's name, a tensor's name as it is. */
  static String tensor(String name) {
    return name.contains(":") ? name : name + ":0";
  }

  private static String op(String input) {
    String name = input.startsWith("^") ? input.substring(1) : input;
    int colon = name.indexOf(':');
    return colon < 0 ? name : name.substring(0, colon);
  }

  /** The input and output tensors: as named, else the one Placeholder and the one sink. */
  static String[] names(GraphDef graph, String input, String output) {
    if (input == null) {
      List<String> placeholders = new ArrayList<>();
      for (NodeDef n : graph.getNodeList()) if (n.getOp().equals("Placeholder")) placeholders.add(n.getName());
      if (placeholders.size() != 1) {
        throw new IllegalArgumentException("frozen graph has " + placeholders.size() + " Placeholder ops ("
            + listed(placeholders) + "); name the input in graph.input");
      }
      input = placeholders.get(0);
    }
    if (output == null) {
      Set<String> read = new HashSet<>();
      for (NodeDef n : graph.getNodeList()) for (String i : n.getInputList()) read.add(op(i));
      List<String> sinks = new ArrayList<>();
      for (NodeDef n : graph.getNodeList()) {
        if (!read.contains(n.getName()) && !NOT_SINKS.contains(n.getOp())) sinks.add(n.getName());
      }
      if (sinks.size() != 1) {
        throw new IllegalArgumentException("frozen graph has " + sinks.size() + " sinks (" + listed(sinks)
            + "); name the output in graph.output");
      }
      output = sinks.get(0);
    }
    return new String[] {tensor(input), tensor(output)};
  }

  private static String listed(List<String> names) {
    return names.isEmpty() ? "none" : String.join(", ", names.subList(0, Math.min(5, names.size())));
  }

  /** The shape of a constant (a frozen weight), through Identity ops; null if it is none. */
  private static long[] constShape(Map<String, NodeDef> nodes, String name) {
    NodeDef node = nodes.get(op(name));
    while (node != null && node.getOp().equals("Identity") && node.getInputCount() > 0) node = nodes.get(op(node.getInput(0)));
    if (node == null || !node.getOp().equals("Const")) return null;
    AttrValue value = node.getAttrMap().get("value");
    if (value == null) return null;
    List<TensorShapeProto.Dim> dims = value.getTensor().getTensorShape().getDimList();
    long[] shape = new long[dims.size()];
    for (int i = 0; i < shape.length; i++) shape[i] = dims.get(i).getSize();
    return shape;
  }

  /**
   * The number of features a (None, n) input takes, read from the ops consuming it: the first
   * matrix product's weight, (n, k) or (k, n) transposed, and any constant broadcast against the
   * input on the way there. Null when no op says; ops that disagree are an error.
   */
  static Long inputWidth(GraphDef graph, String input) {
    Map<String, NodeDef> nodes = new HashMap<>();
    Map<String, List<NodeDef>> readers = new HashMap<>();
    for (NodeDef n : graph.getNodeList()) {
      nodes.put(n.getName(), n);
      for (String i : n.getInputList()) {
        if (!i.startsWith("^")) readers.computeIfAbsent(tensor(i), k -> new ArrayList<>()).add(n);
      }
    }
    Set<Long> widths = new TreeSet<>();
    Set<String> seen = new HashSet<>();
    Deque<String> frontier = new ArrayDeque<>(List.of(tensor(input)));
    while (!frontier.isEmpty()) {
      String t = frontier.pop();
      for (NodeDef n : readers.getOrDefault(t, List.of())) {
        if (!seen.add(n.getName())) continue;
        if (PASS_THROUGH.contains(n.getOp())) {
          frontier.push(n.getName() + ":0");
        } else if (ELEMENTWISE.contains(n.getOp())) {
          for (String other : n.getInputList()) {
            long[] shape = tensor(other).equals(t) ? null : constShape(nodes, other);
            if (shape != null && shape.length >= 1 && shape.length <= 2 && shape[shape.length - 1] > 1) {
              widths.add(shape[shape.length - 1]);
            }
          }
          frontier.push(n.getName() + ":0");
        } else if (MATMUL.containsKey(n.getOp()) && tensor(n.getInput(0)).equals(t)
            && !flag(n, MATMUL.get(n.getOp())[0])) {
          long[] shape = constShape(nodes, n.getInput(1));
          if (shape != null && shape.length == 2) widths.add(shape[flag(n, MATMUL.get(n.getOp())[1]) ? 1 : 0]);
        }
      }
    }
    if (widths.size() > 1) {
      throw new IllegalArgumentException("frozen graph input '" + input + "': the ops reading it take "
          + widths + " features");
    }
    return widths.isEmpty() ? null : widths.iterator().next();
  }

  private static boolean flag(NodeDef n, String attr) {
    AttrValue v = n.getAttrMap().get(attr);
    return v != null && v.getB();
  }

  /**
   * The graph with its input Placeholder given the (None, n) shape its consumers imply, when its
   * own shape is absent or leaves n unknown, so that TensorFlow checks the graph against it on
   * import. A shape of another rank is left as it is, for the loader to refuse.
   */
  static GraphDef withInputShape(GraphDef graph, String input) {
    String name = op(input);
    for (int i = 0; i < graph.getNodeCount(); i++) {
      NodeDef node = graph.getNode(i);
      if (!node.getName().equals(name)) continue;
      if (!node.getOp().equals("Placeholder")) return graph;
      AttrValue attr = node.getAttrMap().get("shape");
      TensorShapeProto shape = attr == null ? null : attr.getShape();
      boolean unknown = shape == null || shape.getUnknownRank();
      if (!unknown && (shape.getDimCount() != 2 || shape.getDim(1).getSize() >= 0)) return graph;
      Long width = inputWidth(graph, input);
      if (width == null) return graph;
      long rows = unknown ? -1 : shape.getDim(0).getSize();
      TensorShapeProto given = TensorShapeProto.newBuilder()
          .addDim(TensorShapeProto.Dim.newBuilder().setSize(rows)).addDim(TensorShapeProto.Dim.newBuilder().setSize(width))
          .build();
      NodeDef shaped = node.toBuilder().putAttr("shape", AttrValue.newBuilder().setShape(given).build()).build();
      return graph.toBuilder().setNode(i, shaped).build();
    }
    return graph;
  }
}
