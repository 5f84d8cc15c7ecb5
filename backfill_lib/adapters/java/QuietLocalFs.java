package deltabackfill.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/** FileContext's checksummed local file system (as LocalFs) over {@link QuietRawLocalFileSystem}. */
public class QuietLocalFs extends ChecksumFs {
    public QuietLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new Raw(uri, conf));
    }

    public QuietLocalFs(Configuration conf) throws IOException, URISyntaxException {
        this(FsConstants.LOCAL_FS_URI, conf);
    }

    /** RawLocalFs over QuietRawLocalFileSystem. */
    public static class Raw extends DelegateToFileSystem {
        public Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(uri, new QuietRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
        }

        public int getUriDefaultPort() {
            return -1;
        }

        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        public boolean isValidName(String src) {
            return true;
        }
    }
}
