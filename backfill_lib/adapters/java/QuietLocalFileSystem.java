package deltabackfill.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/** Hadoop's checksummed local file system over {@link QuietRawLocalFileSystem}. */
public class QuietLocalFileSystem extends LocalFileSystem {
    public QuietLocalFileSystem() {
        super(new QuietRawLocalFileSystem());
    }
}
