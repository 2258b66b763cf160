// Hadoop's own minicluster in one JVM: a real NameNode and DataNode (MiniDFSCluster, WebHDFS on)
// and, unless told otherwise, a real ResourceManager and NodeManager (MiniYARNCluster), all on
// 127.0.0.1. Compiled and started by kafka_testkit/hadoop_cluster.py, which reads ready.json.
//
//   java -cp <classes>:<hadoop-client-minicluster jars> HadoopMiniClusterMain WORK_DIR CONF_DIR yarn|no-yarn
//
// Once the daemons answer, it writes CONF_DIR/core-site.xml, hdfs-site.xml and yarn-site.xml (what a
// client such as spark-submit reads from HADOOP_CONF_DIR / YARN_CONF_DIR), then CONF_DIR/ready.json
// (last, by a rename: a reader never sees half of it). It runs until SIGTERM, whose shutdown hook
// stops YARN (the NodeManager stops its containers) and then HDFS.

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public final class HadoopMiniClusterMain {
    private static final String HOST = "127.0.0.1";

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable failure) {
            // The daemons' threads would keep the JVM alive: exit, which runs the shutdown hook.
            failure.printStackTrace();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: HadoopMiniClusterMain WORK_DIR CONF_DIR yarn|no-yarn");
            System.exit(2);
        }
        File work = new File(args[0]).getAbsoluteFile();
        File confDir = new File(args[1]).getAbsoluteFile();
        boolean withYarn = args[2].equals("yarn");
        confDir.mkdirs();

        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(work, "hdfs").getPath());
        conf.setBoolean("dfs.webhdfs.enabled", true);
        conf.setInt("dfs.replication", 1);
        // WebHDFS redirects a CREATE to the DataNode by the name it registered with.
        conf.set("dfs.datanode.hostname", HOST);
        // Permissions are on, as on a real cluster; the user running this JVM is the superuser.
        conf.setBoolean("dfs.permissions.enabled", true);
        MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf, new File(work, "hdfs"))
                .numDataNodes(1).format(true).build();
        dfs.waitActive();
        String hdfsUri = "hdfs://" + HOST + ":" + dfs.getNameNodePort();
        int httpPort = dfs.getNameNode().getHttpAddress().getPort();

        MiniYARNCluster yarn = null;
        YarnConfiguration yarnConf = null;
        if (withYarn) {
            yarnConf = new YarnConfiguration(dfs.getConfiguration(0));
            yarnConf.set("fs.defaultFS", hdfsUri);
            // Room for a Spark driver (application master) and two executors on one NodeManager;
            // the machine, not YARN, is the limit, so YARN's memory checks are off.
            yarnConf.setInt("yarn.nodemanager.resource.memory-mb", 8192);
            // MiniYARNCluster gives its NodeManagers this instead (4096 MB by default).
            yarnConf.setInt("yarn.minicluster.yarn.nodemanager.resource.memory-mb", 8192);
            yarnConf.setInt("yarn.nodemanager.resource.cpu-vcores", 8);
            yarnConf.setInt("yarn.scheduler.minimum-allocation-mb", 64);
            yarnConf.setInt("yarn.scheduler.maximum-allocation-mb", 8192);
            yarnConf.setInt("yarn.scheduler.maximum-allocation-vcores", 8);
            yarnConf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
            yarnConf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
            // The capacity scheduler gives application masters 10 % of the cluster by default: too
            // little for a driver in cluster mode.
            yarnConf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 1.0f);
            // The minicluster jar leaves Hadoop's capacity-scheduler.xml out: one queue, all of it.
            yarnConf.set("yarn.scheduler.capacity.root.queues", "default");
            yarnConf.setFloat("yarn.scheduler.capacity.root.default.capacity", 100.0f);
            yarnConf.setFloat("yarn.scheduler.capacity.root.default.maximum-capacity", 100.0f);
            // A full disk on a CI machine must not mark the only NodeManager unhealthy.
            yarnConf.setFloat("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", 100.0f);
            yarnConf.setInt("yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb", 0);
            // Containers' logs are kept (the tests read them when a job fails).
            yarnConf.setInt("yarn.nodemanager.delete.debug-delay-sec", 3600);
            yarnConf.set("yarn.resourcemanager.hostname", HOST);
            yarnConf.set("yarn.nodemanager.hostname", HOST);
            yarn = new MiniYARNCluster("kafka-eos-yarn", 1, 1, 1);
            yarn.init(yarnConf);
            yarn.start();
            if (!yarn.waitForNodeManagersToConnect(120_000)) {
                throw new IllegalStateException("the NodeManager did not register with the ResourceManager in 120 s");
            }
            yarnConf = new YarnConfiguration(yarn.getConfig());
        }

        final MiniYARNCluster yarnToStop = yarn;
        final CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                if (yarnToStop != null) {
                    yarnToStop.stop();
                }
                dfs.shutdown();
            } finally {
                stopped.countDown();
            }
        }));

        Configuration core = new Configuration(false);
        core.set("fs.defaultFS", hdfsUri);
        write(core, new File(confDir, "core-site.xml"));
        Configuration hdfs = new Configuration(false);
        hdfs.setInt("dfs.replication", 1);
        hdfs.setBoolean("dfs.webhdfs.enabled", true);
        hdfs.set("dfs.namenode.http-address", HOST + ":" + httpPort);
        write(hdfs, new File(confDir, "hdfs-site.xml"));
        String resourceManager = "";
        if (yarnConf != null) {
            // What MiniYARNCluster bound (its ports are chosen at start), named by address.
            Configuration site = new Configuration(false);
            for (Map.Entry<String, String> entry : yarnConf) {
                String key = entry.getKey();
                if (key.startsWith("yarn.resourcemanager.") || key.startsWith("yarn.scheduler.")) {
                    site.set(key, yarnConf.get(key).replace("localhost", HOST));
                }
            }
            write(site, new File(confDir, "yarn-site.xml"));
            resourceManager = site.get("yarn.resourcemanager.address");
        }

        String ready = "{\"hdfs_uri\": \"" + hdfsUri + "\", \"webhdfs_url\": \"http://" + HOST + ":" + httpPort
                + "\", \"resource_manager\": \"" + resourceManager + "\", \"resource_manager_web\": \""
                + (yarnConf == null ? "" : yarnConf.get("yarn.resourcemanager.webapp.address").replace("localhost", HOST))
                + "\", \"pid\": " + ProcessHandle.current().pid() + "}\n";
        File partial = new File(confDir, "ready.json.partial");
        Files.write(partial.toPath(), ready.getBytes(StandardCharsets.UTF_8));
        Files.move(partial.toPath(), new File(confDir, "ready.json").toPath(), StandardCopyOption.ATOMIC_MOVE);
        System.out.println("HADOOP_MINICLUSTER_READY " + ready.trim());
        System.out.flush();
        stopped.await();
    }

    private static void write(Configuration conf, File file) throws Exception {
        try (OutputStream out = new FileOutputStream(file)) {
            conf.writeXml(out);
        }
    }
}
