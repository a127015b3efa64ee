// Prints, as JSON, the KafkaTopic and KafkaUser CustomResourceDefinitions that Strimzi's published
// API (io.strimzi:api, the `strimzi-api` jar set) builds: tests/strimzi.py installs them on the
// tests' API server. Run by Java's source launcher, with that set as the class path.
import com.fasterxml.jackson.databind.ObjectMapper;
import io.strimzi.api.kafka.Crds;

public class StrimziCrds {
    public static void main(String[] args) throws Exception {
        System.out.println(new ObjectMapper().writeValueAsString(java.util.List.of(Crds.kafkaTopic(), Crds.kafkaUser())));
    }
}
