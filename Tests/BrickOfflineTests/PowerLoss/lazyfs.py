#!/usr/bin/env python3
"""A file system that loses what was not fsynced when the power goes: for PowerLossTests (fusepy).

    lazyfs.py BACKING MOUNTPOINT

Mounts MOUNTPOINT as a view of the directory BACKING. Writes and truncations stay in this
process's memory (the "page cache"), page by page, until the file is fsynced; reads see them.
Creating BACKING/../lazyfs.cut is the power cut: everything not fsynced is dropped, the file is
removed and `cut N` is appended to BACKING/../lazyfs.log (N: how many files lost data). (A file,
not a signal: Python runs signal handlers on its main thread, which libfuse's loop holds.) As LazyFS does for Jepsen, only data is
volatile: creating, renaming and removing files reach BACKING at once. Kernel caching is off
(attributes and entries time out at once; each open drops the file's pages), so that a process
started after a cut reads what survived. Prints `mounted` once the mount answers.
"""
import errno
import os
import sys
import threading

from fuse import FUSE, FuseOSError, Operations

PAGE = 4096
BACKING = os.path.abspath(sys.argv[1])
MOUNTPOINT = sys.argv[2]
LOG = os.path.join(os.path.dirname(BACKING), "lazyfs.log")
CUT = os.path.join(os.path.dirname(BACKING), "lazyfs.cut")


class Volatile:
    """A file's writes not yet fsynced: dirty pages and its size as written."""

    def __init__(self, size):
        self.size = size
        self.pages = {}


class LazyFS(Operations):
    def __init__(self):
        self.mutex = threading.RLock()
        self.files = {}  # path -> Volatile

    def real(self, path):
        return os.path.join(BACKING, path.lstrip("/"))

    def cut(self):
        with self.mutex:
            lost = sum(1 for state in self.files.values() if state.pages or state.size is not None)
            self.files.clear()
        with open(LOG, "a") as f:
            f.write(f"cut {lost}\n")

    # Metadata: straight to the backing directory.
    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self.real(path))
        except OSError as error:
            raise FuseOSError(error.errno)
        attributes = {key: getattr(st, key) for key in (
            "st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")}
        with self.mutex:
            state = self.files.get(path)
            if state is not None:
                attributes["st_size"] = state.size
        return attributes

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self.real(path))

    def access(self, path, mode):
        if not os.access(self.real(path), mode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        os.chmod(self.real(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self.real(path), uid, gid)

    def mkdir(self, path, mode):
        os.mkdir(self.real(path), mode)

    def rmdir(self, path):
        os.rmdir(self.real(path))

    def unlink(self, path):
        with self.mutex:
            self.files.pop(path, None)
            os.unlink(self.real(path))

    def rename(self, old, new):
        with self.mutex:
            os.rename(self.real(old), self.real(new))
            state = self.files.pop(old, None)
            self.files.pop(new, None)
            if state is not None:
                self.files[new] = state

    def utimens(self, path, times=None):
        os.utime(self.real(path), times)

    def statfs(self, path):
        st = os.statvfs(self.real(path))
        return {key: getattr(st, key) for key in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
            "f_frsize", "f_namemax")}

    # Data: through the volatile pages.
    def open(self, path, flags):
        fd = os.open(self.real(path), flags & ~os.O_TRUNC)
        if flags & os.O_TRUNC:
            self.truncate(path, 0)
        return fd

    def create(self, path, mode, fi=None):
        return os.open(self.real(path), os.O_RDWR | os.O_CREAT, mode)

    def state(self, path, fh):
        state = self.files.get(path)
        if state is None:
            state = Volatile(os.fstat(fh).st_size)
            self.files[path] = state
        return state

    def page(self, path, state, index):
        page = state.pages.get(index)
        if page is None:
            fd = os.open(self.real(path), os.O_RDONLY)
            try:
                page = bytearray(os.pread(fd, PAGE, index * PAGE))
            finally:
                os.close(fd)
            page.extend(b"\0" * (PAGE - len(page)))
            state.pages[index] = page
        return page

    def read(self, path, size, offset, fh):
        with self.mutex:
            state = self.files.get(path)
            if state is None:
                return os.pread(fh, size, offset)
            end = min(offset + size, state.size)
            if end <= offset:
                return b""
            data = bytearray(os.pread(fh, end - offset, offset))
            data.extend(b"\0" * (end - offset - len(data)))
            for index in range(offset // PAGE, (end - 1) // PAGE + 1):
                page = state.pages.get(index)
                if page is None:
                    continue
                start = max(offset, index * PAGE)
                stop = min(end, (index + 1) * PAGE)
                data[start - offset:stop - offset] = page[start - index * PAGE:stop - index * PAGE]
            return bytes(data)

    def write(self, path, data, offset, fh):
        with self.mutex:
            state = self.state(path, fh)
            position = offset
            remaining = memoryview(data)
            while remaining:
                index = position // PAGE
                within = position - index * PAGE
                count = min(PAGE - within, len(remaining))
                self.page(path, state, index)[within:within + count] = remaining[:count]
                position += count
                remaining = remaining[count:]
            state.size = max(state.size, offset + len(data))
            return len(data)

    def truncate(self, path, length, fh=None):
        with self.mutex:
            if fh is None:
                fd = os.open(self.real(path), os.O_RDONLY)
                try:
                    state = self.state(path, fd)
                finally:
                    os.close(fd)
            else:
                state = self.state(path, fh)
            for index in [i for i in state.pages if i * PAGE >= length]:
                del state.pages[index]
            if length % PAGE and length // PAGE in state.pages:
                page = state.pages[length // PAGE]
                page[length % PAGE:] = b"\0" * (PAGE - length % PAGE)
            elif length % PAGE and length < state.size:
                # The last page keeps what is below the new end, and zeros above it.
                page = self.page(path, state, length // PAGE)
                page[length % PAGE:] = b"\0" * (PAGE - length % PAGE)
            state.size = length

    def fsync(self, path, datasync, fh):
        with self.mutex:
            state = self.files.pop(path, None)
            if state is None:
                os.fsync(fh)
                return 0
            fd = os.open(self.real(path), os.O_WRONLY)
            try:
                for index, page in sorted(state.pages.items()):
                    if index * PAGE < state.size:
                        os.pwrite(fd, bytes(page[:min(PAGE, state.size - index * PAGE)]), index * PAGE)
                os.ftruncate(fd, state.size)
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

    def flush(self, path, fh):
        return 0  # close() is not a sync

    def release(self, path, fh):
        os.close(fh)
        return 0


if __name__ == "__main__":
    filesystem = LazyFS()

    def watch_for_cuts():
        import time
        while True:
            if os.path.exists(CUT):
                filesystem.cut()
                os.unlink(CUT)
            time.sleep(0.005)

    threading.Thread(target=watch_for_cuts, daemon=True).start()

    def announce():
        import time
        for _ in range(500):
            if os.path.ismount(MOUNTPOINT):
                print("mounted", flush=True)
                return
            time.sleep(0.01)

    threading.Thread(target=announce, daemon=True).start()
    FUSE(filesystem, MOUNTPOINT, foreground=True, nothreads=False, attr_timeout=0, entry_timeout=0,
         negative_timeout=0, default_permissions=True)
