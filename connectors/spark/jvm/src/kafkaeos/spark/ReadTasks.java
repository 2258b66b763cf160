package kafkaeos.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * What the kit's source needs from the driver's JVM to plan a batch's read tasks: how many tasks
 * Spark runs at once.
 *
 * <p>The source plans its read tasks in a Python process that has no SparkContext, and a large
 * batch must be spread over the cluster's task slots (at least {@code min(partitions, slots)}
 * tasks), while a small one keeps one task, so one transaction
 * ({@code connectors/spark/datasource_readers.py}, {@code plan_read_tasks}). So the provider hands
 * the source Spark's {@code defaultParallelism} as the option {@link #OPTION}, when the source is
 * made: at the start of a streaming query, or of a batch read. A value the user gave wins; the
 * Python source validates it ({@code connectors/spark/options.py}).
 */
final class ReadTasks {
    static final String OPTION = "eos.taskSlots";
    /** The options only a source takes, one of which every read names: a sink's options get no slots. */
    private static final String[] SUBSCRIPTIONS = {"subscribe", "subscribePattern", "assign"};

    private ReadTasks() {
    }

    /** A source's {@code options} with {@link #OPTION} set to Spark's default parallelism, unless
     *  given; a sink's as they are. */
    static CaseInsensitiveStringMap withTaskSlots(CaseInsensitiveStringMap options) {
        if (options.containsKey(OPTION) || java.util.Arrays.stream(SUBSCRIPTIONS).noneMatch(options::containsKey)) {
            return options;
        }
        Map<String, String> planned = new HashMap<>(options.asCaseSensitiveMap());
        planned.put(OPTION, Integer.toString(SparkSession.active().sparkContext().defaultParallelism()));
        return new CaseInsensitiveStringMap(planned);
    }
}
