package kafkaeos.spark;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code kafka-eos} format on the JVM: the kit's Python data source, registered under
 * {@link #PYTHON_SOURCE}, with Spark's update output mode allowed.
 *
 * <p>Spark plans every Python data source through {@link PythonDataSourceV2}, whose write builder
 * implements {@link SupportsTruncate} (complete mode) but not the marker interface
 * {@link SupportsStreamingUpdateAsAppend} that Spark requires for update mode. Update mode writes
 * the batch's changed rows as an append does, which is what the kit's sink does with any rows, so
 * this provider only adds the marker. Everything else is Spark's own Python data source: this
 * class is one, bound to the Python source's name, and its table and write builder delegate to
 * the ones Spark makes (they are not subclassed, so that their constructors, which differ between
 * Spark releases, are never called from here).
 *
 * <p>Found by Spark through {@code META-INF/services/org.apache.spark.sql.sources.DataSourceRegister}
 * before any Python data source; the Python source must therefore not be registered under
 * {@link #FORMAT} where this class is on the class path (Spark refuses that name as taken).
 * {@code connectors/spark/jvm_provider.py} and {@code connectors/spark/datasource.py} hold the same two names.
 */
public class KafkaEosTableProvider extends PythonDataSourceV2 implements DataSourceRegister {
    /** The format users write: {@code format("kafka-eos")}. */
    public static final String FORMAT = "kafka-eos";
    /** The name the kit's Python data source is registered under when this provider carries {@link #FORMAT}. */
    public static final String PYTHON_SOURCE = "kafka-eos-python";

    public KafkaEosTableProvider() {
        super.setShortName(PYTHON_SOURCE);
    }

    @Override
    public String shortName() {
        return FORMAT;
    }

    /**
     * Spark names every {@link PythonDataSourceV2} it resolves by the format it was asked for, and
     * then looks the Python source up by that name. This one is bound to {@link #PYTHON_SOURCE}
     * from its construction, so the format name is not taken.
     */
    @Override
    public void setShortName(String name) {
    }

    /**
     * Spark makes the kit's Python data source once per provider, at the first of these calls, and
     * every reader and writer of the query is that one instance: so a source's options get the
     * task slots here ({@link ReadTasks}), not in the scan's options, which reach no Python code.
     */
    @Override
    public PythonDataSourceCreationResult getOrCreateDataSourceInPython(
            String shortName, CaseInsensitiveStringMap options, scala.Option<StructType> userSchema) {
        return super.getOrCreateDataSourceInPython(shortName, ReadTasks.withTaskSlots(options), userSchema);
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new UpdatableTable(super.getTable(schema, partitioning, properties));
    }

    /** Spark's table of the Python data source, whose write builder takes update mode too. */
    static final class UpdatableTable implements SupportsRead, SupportsWrite {
        private final Table table;

        UpdatableTable(Table table) {
            this.table = table;
        }

        @Override
        public String name() {
            return FORMAT;
        }

        @Override
        public StructType schema() {
            return table.schema();
        }

        @Override
        public Transform[] partitioning() {
            return table.partitioning();
        }

        @Override
        public Map<String, String> properties() {
            return table.properties();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return table.capabilities();
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return ((SupportsRead) table).newScanBuilder(options);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return new UpdatableWriteBuilder(((SupportsWrite) table).newWriteBuilder(info), info);
        }

        @Override
        public String toString() {
            return FORMAT;
        }
    }

    /**
     * Spark's write builder of the Python data source, marked as taking update mode. In update
     * mode Spark calls {@link #build()} (the changed rows are appended); in complete mode
     * {@link #truncate()} first, which Spark's builder answers (Kafka has nothing to truncate, as
     * with Spark's own Kafka sink).
     */
    static final class UpdatableWriteBuilder implements SupportsTruncate, SupportsStreamingUpdateAsAppend {
        private final WriteBuilder builder;
        private final LogicalWriteInfo info;

        UpdatableWriteBuilder(WriteBuilder builder, LogicalWriteInfo info) {
            this.builder = builder;
            this.info = info;
        }

        @Override
        public WriteBuilder truncate() {
            return new UpdatableWriteBuilder(((SupportsTruncate) builder).truncate(), info);
        }

        @Override
        public Write build() {
            return WritePlanning.planned(builder.build(), info);
        }

        @Override
        @SuppressWarnings("deprecation")
        public BatchWrite buildForBatch() {
            return builder.buildForBatch();
        }

        @Override
        @SuppressWarnings("deprecation")
        public StreamingWrite buildForStreaming() {
            return builder.buildForStreaming();
        }
    }
}
