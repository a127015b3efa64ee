package dev.scorestream.bench;

import com.sun.tools.attach.VirtualMachine;
import java.util.List;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * The broker's own share of a request's latency, from its request metrics over JMX: for each
 * request type given, the time in its request queue, in its handler (the append, for a produce
 * request), and in all (queue, handler, response queue, send), as one JSON line each.
 *
 * <p>The broker is reached through the Attach API (a local JMX agent in its JVM, no port), so the
 * broker needs no JMX option. Its histograms are Yammer's exponentially decaying ones: their
 * percentiles weigh the last minute or so most, and their max is the broker's since it started.
 *
 * <pre>BrokerRequestTimes BROKER_PID REQUEST [REQUEST...]   e.g. 4242 Produce FetchConsumer</pre>
 */
public final class BrokerRequestTimes {
  private BrokerRequestTimes() {}

  static final List<String> TIMES = List.of("RequestQueueTimeMs", "LocalTimeMs", "TotalTimeMs");
  static final List<String> FIELDS = List.of("Count", "50thPercentile", "99thPercentile", "999thPercentile", "Max");

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: BrokerRequestTimes BROKER_PID REQUEST [REQUEST...]");
      System.exit(2);
    }
    VirtualMachine vm = VirtualMachine.attach(args[0]);
    String address;
    try {
      address = vm.startLocalManagementAgent();
    } finally {
      vm.detach();
    }
    try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
      MBeanServerConnection server = connector.getMBeanServerConnection();
      for (int i = 1; i < args.length; i++) {
        System.out.println(requestJson(server, args[i]));
      }
    }
  }

  static String requestJson(MBeanServerConnection server, String request) throws Exception {
    StringBuilder json = new StringBuilder("{\"request\": \"").append(request).append('"');
    for (String time : TIMES) {
      ObjectName name = new ObjectName("kafka.network:type=RequestMetrics,name=" + time + ",request=" + request);
      json.append(", \"").append(time).append("\": {");
      for (int f = 0; f < FIELDS.size(); f++) {
        Object value = server.getAttribute(name, FIELDS.get(f));
        json.append(f == 0 ? "" : ", ").append('"').append(FIELDS.get(f)).append("\": ").append(value);
      }
      json.append('}');
    }
    return json.append('}').toString();
  }
}
