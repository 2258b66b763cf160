package kafkaeos.spark.functions;

import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;

/**
 * The shuffle key that sends a Kafka partition's rows to write task {@code slot % tasks}. It is
 * {@code kafka_eos_write_task_key(slot, tasks)} in SQL, the key of {@code repartition(tasks, ...)}
 * (registered by {@code connectors/spark/aligned_write.py}); {@code slot} numbers the output's
 * partitions, 0 up.
 *
 * <p>Why not repartition by the slot itself: Spark places a row in shuffle partition
 * {@code pmod(murmur3(key, 42), tasks)}, and 64 slots hashed into 8 tasks land unevenly (some
 * tasks get twice the mean, and the batch waits for them). This returns, for each slot, the
 * smallest int that Spark's hash places in task {@code slot % tasks}, so the slots are dealt round
 * robin. Correctness does not rest on it: the key is a function of the slot, so a slot's rows meet
 * in one task whatever Spark's hash is; a Spark that hashed otherwise would only deal them unevenly.
 */
public final class WriteTaskKey implements UDF2<Integer, Integer, Integer> {
    private static final long serialVersionUID = 1L;
    /** Spark's seed for hash partitioning (HashPartitioning's Murmur3Hash). */
    private static final int SPARK_HASH_SEED = 42;
    /** tasks -> the key of each task. */
    private static final ConcurrentHashMap<Integer, int[]> KEYS = new ConcurrentHashMap<>();

    @Override
    public Integer call(Integer slot, Integer tasks) {
        if (slot == null || tasks == null || tasks <= 0) {
            return null; // the rows of unknown topics: one task takes them all
        }
        return KEYS.computeIfAbsent(tasks, WriteTaskKey::keys)[Math.floorMod(slot, tasks)];
    }

    /** For each task 0..tasks-1, the smallest non-negative int that Spark's hash partitioning
     *  places in it: about tasks * ln(tasks) hashes, once per JVM and task count. */
    static int[] keys(int tasks) {
        int[] keys = new int[tasks];
        java.util.Arrays.fill(keys, -1);
        int found = 0;
        for (int candidate = 0; found < tasks; candidate++) {
            int task = Math.floorMod(Murmur3_x86_32.hashInt(candidate, SPARK_HASH_SEED), tasks);
            if (keys[task] < 0) {
                keys[task] = candidate;
                found++;
            }
        }
        return keys;
    }
}
