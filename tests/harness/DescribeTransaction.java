// Prints the coordinator (broker id) and state of one transactional id, as Kafka's Admin API
// (DescribeTransactions, KIP-664) reports them: confluent-kafka's AdminClient has no such call.
// Run by Java's source launcher with the pinned broker jars as the class path (kraft_cluster.py).
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;

public class DescribeTransaction {
    public static void main(String[] args) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", args[0]))) {
            TransactionDescription d = admin.describeTransactions(List.of(args[1])).description(args[1]).get();
            System.out.println(d.coordinatorId() + " " + d.state());
        }
    }
}
