package kafkaeos.spark;

import java.lang.reflect.Method;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.distributions.Distributions;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.types.StructField;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The planning of {@code format("kafka-eos")}'s write tasks: how many, so Kafka transactions, a
 * micro-batch has, and which rows each takes (the foreachBatch sink plans its own in
 * {@code connectors/spark/write_planning.py}).
 *
 * <p>Spark writes one task per partition of the plan it hands the sink. Behind a stateful operator
 * (an aggregation, a window, a deduplication, a stream-stream join, state in Python) that is
 * {@code spark.sql.shuffle.partitions}, 200 by default, and each task that writes a row costs a
 * transaction: a producer, its InitProducerId, a flush and an EndTxn, on top of Spark's own work
 * (bench/README.md, stateful queries). Spark's own Kafka sink shares one producer per executor
 * among those tasks; a transaction cannot be shared between tasks that Spark retries one by one.
 * So the write asks Spark for fewer, larger tasks: the rows clustered by their Kafka {@code key}
 * (a hash shuffle keeps each key's rows in their order; behind a stateful operator a key's rows
 * come from one partition) into as many partitions as Spark runs tasks at once
 * ({@code defaultParallelism}), which Spark 4 plans for micro-batch writes too.
 *
 * <p>At defaults ({@code eos.writeTasks=auto}) a batch's write tasks are bounded by the task slots,
 * so a batch commits at most {@code defaultParallelism} markers per output partition, whatever the
 * plan's partitions are:
 * <ul>
 * <li>behind a stateful operator with more shuffle partitions than task slots, the rows are
 *     clustered by key into the task slots;</li>
 * <li>a map-only query that reads only the kit's own source is left as planned: that source plans
 *     at most one read task per slot for a large batch and one task for a small one
 *     ({@link ReadTasks}), so a shuffle would cost and save nothing;</li>
 * <li>any other map-only query (Spark's own Kafka source plans one read task per Kafka partition,
 *     64 of them on a 64-partition topic) is clustered into the task slots: by {@code key}, or by
 *     {@code value} where the rows have no key column (a producer keeps no order among keyless
 *     rows). Rows with a null key all hash alike, so they share one task.</li>
 * </ul>
 * {@code eos.writeTasks=N} asks for N tasks, clustered the same way, in any query.
 *
 * <p>Rows that carry their own {@code partition} column are aligned instead, in any query: clustered
 * by {@code partition} (and by {@code topic} where each row names its topic) into as many tasks as
 * Spark runs at once, or {@code eos.writeTasks}, so that the rows of one Kafka partition are written
 * by one task, one transaction, and a batch commits one transaction marker per partition it wrote
 * (docs/exactly-once.md, "Transaction markers per batch"). Spark's write distribution takes plain
 * columns only, so this is how the format aligns: on the column, which a query may compute with the
 * kit's {@code kafka_eos_partition} (Java's partitioning of a key).
 *
 * <p>The option is validated by the Python sink ({@code connectors/spark/options.py}); a value this
 * class cannot read leaves the plan as it is, and the Python sink refuses it in one line.
 */
public final class WritePlanning {
    static final String OPTION = "eos.writeTasks";
    private static final String KEY = "key";
    private static final String VALUE = "value";
    private static final String PARTITION = "partition";
    private static final String TOPIC = "topic";
    /** The logical operators that keep state across micro-batches (their class names, which
     *  differ in package between Spark releases); a join keeps state when both sides stream. */
    private static final Set<String> STATEFUL = Set.of(
        "Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "Distinct", "FlatMapGroupsWithState",
        "FlatMapGroupsInPandasWithState", "TransformWithState", "TransformWithStateInPandas",
        "TransformWithStateInPySpark");

    private static final Logger LOG = LoggerFactory.getLogger(WritePlanning.class);
    /** The queries whose plan could not be seen, warned once each. */
    private static final Set<String> WARNED = ConcurrentHashMap.newKeySet();

    private WritePlanning() {
    }

    /** {@code write}, asking for its write tasks bounded by the task slots, or for rows aligned on
     *  their partition (class doc). */
    static Write planned(Write write, LogicalWriteInfo info) {
        String[] partitionColumns = partitionColumns(info);
        if (partitionColumns.length > 0) {
            int tasks = requestedTasks(info);
            return new Clustered(write, partitionColumns,
                tasks > 0 ? tasks : SparkSession.active().sparkContext().defaultParallelism());
        }
        int tasks = tasks(info);
        return tasks > 0 ? new Clustered(write, new String[] {clusteringColumn(info)}, tasks) : write;
    }

    /** What rows without a partition column are clustered by: {@code key}, or {@code value} where
     *  the rows have no key column. */
    static String clusteringColumn(LogicalWriteInfo info) {
        for (StructField field : info.schema().fields()) {
            if (field.name().equalsIgnoreCase(KEY)) {
                return KEY;
            }
        }
        return VALUE;
    }

    /** The columns the rows are aligned on: {@code partition}, after {@code topic} where the rows
     *  name their topic (no {@code topic} option); none without a {@code partition} column. */
    static String[] partitionColumns(LogicalWriteInfo info) {
        boolean partition = false;
        boolean topic = false;
        for (StructField field : info.schema().fields()) {
            partition |= field.name().equalsIgnoreCase(PARTITION);
            topic |= field.name().equalsIgnoreCase(TOPIC);
        }
        if (!partition) {
            return new String[0];
        }
        return topic && info.options().get(TOPIC) == null ? new String[] {TOPIC, PARTITION} : new String[] {PARTITION};
    }

    /** {@code eos.writeTasks} as a number; -1 for {@code auto} (or unset), 0 for a value this class
     *  cannot read (the Python sink refuses it). */
    static int requestedTasks(LogicalWriteInfo info) {
        String raw = info.options().get(OPTION);
        if (raw == null || raw.trim().equalsIgnoreCase("auto")) {
            return -1;
        }
        try {
            return Math.max(0, Integer.parseInt(raw.trim()));
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    /** The number of write tasks to cluster the rows into; 0 to leave the plan's partitions as they are. */
    static int tasks(LogicalWriteInfo info) {
        int requested = requestedTasks(info);
        if (requested >= 0) {
            return requested;
        }
        SparkSession spark = SparkSession.active();
        int slots = spark.sparkContext().defaultParallelism();
        LogicalPlan plan = streamingPlan(info.queryId());
        if (plan == null) {
            return 0; // a batch write (its read tasks are the source's), or a plan that cannot be seen
        }
        if (keepsState(plan)) {
            int shufflePartitions = Integer.parseInt(spark.conf().get("spark.sql.shuffle.partitions").trim());
            return shufflePartitions > slots ? slots : 0;
        }
        return readsOnlyTheKitsSource(plan) ? 0 : slots;
    }

    /** The analysed plan of the streaming query {@code queryId}; null for a batch write, or where
     *  it cannot be seen (said once, by {@link #unreachable}). */
    static LogicalPlan streamingPlan(String queryId) {
        try {
            StreamingQuery query = null;
            for (scala.Option<SparkSession> session : java.util.List.of(
                    SparkSession.getActiveSession(), SparkSession.getDefaultSession())) {
                if (query == null && session.isDefined()) {
                    query = session.get().streams().get(queryId);
                }
            }
            if (query == null) {
                return null; // a batch write: no streaming query has its id
            }
            // The query's analysed plan. No public API names it; StreamingQueryWrapper.streamingQuery
            // and StreamExecution.logicalPlan have been there since Spark 2, and a Spark without them
            // only loses the bound on its write tasks, which unreachable() says.
            Object execution = method(query, "streamingQuery").invoke(query);
            return (LogicalPlan) method(execution, "logicalPlan").invoke(execution);
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            unreachable(queryId, e.toString());
            return null;
        }
    }

    /** Whether every source the plan streams from is a table of the kit's provider, whose read
     *  tasks {@link ReadTasks} bounds by the task slots. A streaming leaf that names no table
     *  (Spark's memory or v1 sources) is another source; a static leaf is not a source of the
     *  batch's tasks. */
    public static boolean readsOnlyTheKitsSource(LogicalPlan plan) {
        if (plan.children().isEmpty()) {
            return !plan.isStreaming() || tableOf(plan) instanceof KafkaEosTableProvider.UpdatableTable;
        }
        scala.collection.Iterator<LogicalPlan> children = plan.children().iterator();
        while (children.hasNext()) {
            if (!readsOnlyTheKitsSource(children.next())) {
                return false;
            }
        }
        return true;
    }

    /** The table a streaming leaf reads: {@code relation().table()} of Spark 4's scan relation, or
     *  {@code table()} of a relation that has one; null where neither is there. */
    private static Object tableOf(LogicalPlan leaf) {
        Object relation = leaf;
        try {
            relation = method(leaf, "relation").invoke(leaf);
        } catch (ReflectiveOperationException | RuntimeException e) {
            // No wrapped relation: the leaf may be one itself.
        }
        try {
            return method(relation, "table").invoke(relation);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /** One WARNING per query: its write keeps the plan's partitions as write tasks. */
    private static void unreachable(String queryId, String why) {
        if (!WARNED.add(String.valueOf(queryId))) {
            return;
        }
        String partitions = "?";
        try {
            partitions = SparkSession.active().conf().get("spark.sql.shuffle.partitions");
        } catch (RuntimeException e) {
            // Only the figure in the message is lost.
        }
        LOG.warn("kafka-eos: cannot see the plan of streaming query {} ({}), so cannot tell what it reads or "
            + "whether it keeps state: its batches keep one write task, so one Kafka transaction, per partition "
            + "of the plan (one per Kafka partition behind Spark's source, {} (spark.sql.shuffle.partitions) "
            + "behind a stateful operator). Set eos.writeTasks=N to ask for N",
            queryId, why, partitions);
    }

    private static Method method(Object target, String name) throws NoSuchMethodException {
        Method method = target.getClass().getMethod(name);
        method.setAccessible(true);
        return method;
    }

    public static boolean keepsState(LogicalPlan plan) {
        String name = plan.getClass().getSimpleName();
        if (STATEFUL.contains(name)) {
            return true;
        }
        scala.collection.Iterator<LogicalPlan> children = plan.children().iterator();
        boolean streamingChildren = plan.children().size() == 2;
        while (children.hasNext()) {
            LogicalPlan child = children.next();
            streamingChildren &= child.isStreaming();
            if (keepsState(child)) {
                return true;
            }
        }
        return name.equals("Join") && streamingChildren;
    }

    /** Spark's write of the Python data source, asking for its rows clustered by {@code columns}
     *  in {@code tasks} partitions; everything else is delegated. */
    static final class Clustered implements RequiresDistributionAndOrdering {
        private final Write write;
        private final String[] columns;
        private final int tasks;

        Clustered(Write write, String[] columns, int tasks) {
            this.write = write;
            this.columns = columns.clone();
            this.tasks = tasks;
        }

        @Override
        public Distribution requiredDistribution() {
            Expression[] clustering = new Expression[columns.length];
            for (int i = 0; i < columns.length; i++) {
                clustering[i] = Expressions.column(columns[i]);
            }
            return Distributions.clustered(clustering);
        }

        @Override
        public int requiredNumPartitions() {
            return tasks;
        }

        @Override
        public SortOrder[] requiredOrdering() {
            return new SortOrder[0];
        }

        @Override
        public String description() {
            return write.description();
        }

        @Override
        public BatchWrite toBatch() {
            return write.toBatch();
        }

        @Override
        public StreamingWrite toStreaming() {
            return write.toStreaming();
        }

        @Override
        public CustomMetric[] supportedCustomMetrics() {
            return write.supportedCustomMetrics();
        }

        @Override
        public CustomTaskMetric[] reportDriverMetrics() {
            return write.reportDriverMetrics();
        }
    }
}
