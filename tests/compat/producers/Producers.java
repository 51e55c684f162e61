// Lists the active idempotent and transactional producers of each partition of a topic, as the
// broker keeps them (Kafka's Admin client, DescribeProducers): a record written without
// idempotence leaves no producer there. Run from source with the broker's classpath:
//   java -cp 'LIBS/*' Producers.java BOOTSTRAP TOPIC PARTITIONS
// Prints one line per producer: PARTITION<TAB>PRODUCER_ID<TAB>LAST_SEQUENCE.
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.common.TopicPartition;

public class Producers {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        List<TopicPartition> partitions = new ArrayList<>();
        for (int p = 0; p < Integer.parseInt(args[2]); p++) {
            partitions.add(new TopicPartition(args[1], p));
        }
        try (Admin admin = Admin.create(props)) {
            Map<TopicPartition, PartitionProducerState> states = admin.describeProducers(partitions).all().get();
            for (TopicPartition tp : partitions) {
                for (ProducerState producer : states.get(tp).activeProducers()) {
                    System.out.println(tp.partition() + "\t" + producer.producerId() + "\t" + producer.lastSequence());
                }
            }
        }
    }
}
