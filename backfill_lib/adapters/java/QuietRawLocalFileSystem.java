package deltabackfill.hadoop;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system, setting permissions and telling links in Java.
 *
 * <p>Without Hadoop's native library, RawLocalFileSystem starts a {@code chmod} process for every file and folder
 * it creates and a {@code readlink} process for every link status a FileContext rename asks for: a Delta commit of
 * a few files starts dozens. The answers here are the same; only a mode beyond rwx bits and a path that is a link
 * still go to Hadoop's own code.
 */
public class QuietRawLocalFileSystem extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {
        PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
        PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    public void setPermission(Path p, FsPermission permission) throws IOException {
        int mode = permission.toShort();
        if ((mode & ~0777) != 0) {  // sticky or set-id bits, which java.nio cannot set: chmod, as Hadoop does
            super.setPermission(p, permission);
            return;
        }
        Set perms = EnumSet.noneOf(PosixFilePermission.class);
        for (int i = 0; i < BITS.length; i++) {
            if ((mode & (1 << i)) != 0) {
                perms.add(BITS[i]);
            }
        }
        Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
    }

    public FileStatus getFileLinkStatus(Path f) throws IOException {
        // Hadoop asks readlink about new File(f.toString()); only a link there needs its answer
        if (Files.isSymbolicLink(new File(f.toString()).toPath())) {
            return super.getFileLinkStatus(f);
        }
        return getFileStatus(f);
    }
}
