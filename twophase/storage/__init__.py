"""Where the kit's checkpoint state is kept: a directory of write-once files on a local or mounted
path, on HDFS through WebHDFS, or on the object stores ``pyarrow.fs`` serves (S3, GCS, ABFS), each
with its own conditional create. What is stored there, and why it decides a checkpoint, is the
protocol's: ``design/exactly-once-protocol.md``."""
