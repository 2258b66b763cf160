package kafkaeos.spark.functions;

import org.apache.spark.sql.api.java.UDF2;

/**
 * The Kafka partition that Java's default partitioner gives a keyed record: the positive 32-bit
 * MurmurHash2 of the serialized key, modulo the topic's partition count. It is
 * {@code kafka_eos_partition(bytes, partitionCount)} in SQL, registered by
 * {@code connectors/spark/aligned_write.py}, which repartitions a batch so that the rows of one
 * Kafka partition go to one write task, so one transaction: its markers then follow the output's
 * partitions, not write tasks times partitions.
 *
 * <p>Null when either argument is null (a topic whose partition count the driver does not know):
 * those rows then go to one write task together, which keeps the bound. A JVM function, not a
 * Python one: a Python UDF would send every key through a Python worker once more, and Spark's own
 * {@code hash} is MurmurHash3, which places keys elsewhere. Compiled for Java 8, the oldest Java
 * Spark 3.5 runs on, against only Spark's {@code UDF2}, which every line since 1.3 has.
 */
public final class KafkaPartition implements UDF2<byte[], Integer, Integer> {
    private static final long serialVersionUID = 1L;

    /** MurmurHash2's multiplier and the seed Kafka's partitioner uses. */
    private static final int M = 0x5bd1e995;
    private static final int SEED = 0x9747b28c;

    @Override
    public Integer call(byte[] bytes, Integer partitionCount) {
        if (bytes == null || partitionCount == null || partitionCount <= 0) {
            return null;
        }
        // toPositive: the sign bit cleared, as Kafka's Utils.toPositive (not Math.abs).
        return (murmur2(bytes) & 0x7fffffff) % partitionCount;
    }

    /** The 32-bit MurmurHash2 of {@code data} with Kafka's seed (little-endian 4-byte blocks). */
    static int murmur2(byte[] data) {
        int length = data.length;
        int h = SEED ^ length;
        int whole = length - (length & 3);
        for (int i = 0; i < whole; i += 4) {
            int k = (data[i] & 0xff) | (data[i + 1] & 0xff) << 8 | (data[i + 2] & 0xff) << 16
                | (data[i + 3] & 0xff) << 24;
            k *= M;
            k ^= k >>> 24;
            k *= M;
            h *= M;
            h ^= k;
        }
        switch (length & 3) {
            case 3:
                h ^= (data[whole + 2] & 0xff) << 16;
                // fall through: MurmurHash2 mixes the tail bytes from the last one down
            case 2:
                h ^= (data[whole + 1] & 0xff) << 8;
                // fall through
            case 1:
                h ^= data[whole] & 0xff;
                h *= M;
                break;
            default:
                break;
        }
        h ^= h >>> 13;
        h *= M;
        h ^= h >>> 15;
        return h;
    }
}
