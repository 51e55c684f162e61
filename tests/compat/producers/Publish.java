// Publishes records with Kafka's own Java producer (kafka-clients), as a platform team's service,
// Kafka Streams, Flink or Debezium would: the producer's defaults (idempotent, acks=all) unless
// told otherwise. Run from source with the broker's classpath:
//   java -cp 'LIBS/*' Publish.java BOOTSTRAP TOPIC MODE [CODEC] < records
// MODE: plain, commit or abort (one transaction); CODEC: none, gzip, snappy, lz4, zstd.
// Each stdin line is KEY<TAB>VALUE (the value is one line of JSON). Prints "delivered N".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Publish {
    public static void main(String[] args) throws Exception {
        String mode = args[2];
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.length > 3 ? args[3] : "none");
        if (!mode.equals("plain")) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "tickerwire-compat-java-" + mode);
        }
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            int tab = line.indexOf('\t');
            records.add(new ProducerRecord<>(args[1],
                line.substring(0, tab).getBytes(StandardCharsets.UTF_8),
                line.substring(tab + 1).getBytes(StandardCharsets.UTF_8)));
        }
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            if (!mode.equals("plain")) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (ProducerRecord<byte[], byte[]> record : records) {
                sent.add(producer.send(record));
            }
            producer.flush();
            for (Future<RecordMetadata> future : sent) {
                future.get();
            }
            if (mode.equals("commit")) {
                producer.commitTransaction();
            } else if (mode.equals("abort")) {
                producer.abortTransaction();
            }
            System.out.println("delivered " + sent.size());
        }
    }
}
