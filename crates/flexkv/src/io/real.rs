//! [`RealVfs`]: the operating system's file system behind the [`Vfs`] trait.
//!
//! Positional reads and writes (`pread`/`pwrite`, and `preadv`/`pwritev` for several
//! buffers at once), `fdatasync` for file syncs, an `fsync` of the directory for
//! `sync_dir`, `fallocate(PUNCH_HOLE | KEEP_SIZE)` for holes, and `flock` for locks (so
//! a second open of the same lock file conflicts even inside one process).

use std::fs::{self, File, OpenOptions};
use std::io::{IoSlice, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rustix::fs::{fallocate, FallocateFlags};

use super::{FileLock, Held, Mapped, OpenMode, Vfs, VfsFile, Window};
use crate::{Error, Result};

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealVfs;

impl RealVfs {
    /// The real file system, shared.
    pub fn shared() -> Arc<dyn Vfs> {
        Arc::new(RealVfs)
    }
}

#[derive(Debug)]
struct RealFile {
    file: File,
    path: PathBuf,
    /// Serializes appends: finding the end and writing there must not interleave.
    append_lock: Mutex<()>,
}

impl Vfs for RealVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn VfsFile>> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(mode != OpenMode::ReadOnly);
        match mode {
            OpenMode::Create => opts.create(true),
            OpenMode::CreateNew => opts.create_new(true),
            OpenMode::Existing | OpenMode::ReadOnly => &mut opts,
        };
        let file = open_noatime(&opts, path).map_err(|e| Error::io("open", path, e))?;
        Ok(Arc::new(RealFile {
            file,
            path: path.to_path_buf(),
            append_lock: Mutex::new(()),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        path.try_exists().map_err(|e| Error::io("stat", path, e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(|e| Error::io("remove", path, e))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let entry = entry.map_err(|e| Error::io("list", dir, e))?;
            let is_file = entry
                .file_type()
                .map_err(|e| Error::io("list", dir, e))?
                .is_file();
            if is_file {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).map_err(|e| Error::io("create_dir", dir, e))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("sync_dir", dir, e))
    }

    fn lock(&self, path: &Path) -> Result<FileLock> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("lock", path, e))?;
        let taken = file.try_lock();
        held(file, taken, path)
    }

    fn lock_shared(&self, path: &Path) -> Result<FileLock> {
        let file = File::open(path).map_err(|e| Error::io("lock", path, e))?;
        let taken = file.try_lock_shared();
        held(file, taken, path)
    }
}

/// The lock on `file` (at `path`) that an attempt to take it gave: held, or taken by
/// someone else ([`Error::Locked`]).
fn held(file: File, taken: Result<(), fs::TryLockError>, path: &Path) -> Result<FileLock> {
    match taken {
        Ok(()) => Ok(FileLock::new(file)),
        Err(fs::TryLockError::WouldBlock) => Err(Error::Locked(path.to_path_buf())),
        Err(fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
    }
}

/// Starts the write-back of `[offset, offset + len)` of `file` without waiting for it
/// (`sync_file_range` with `SYNC_FILE_RANGE_WRITE` alone, as RocksDB's
/// `bytes_per_sync` does): the pages go to the device while the caller goes on, and
/// the `fdatasync` that follows waits for what is still in flight instead of writing
/// it all then. A hint, so its failure is ignored (the `fdatasync` reports a write-back
/// that failed); elsewhere than on Linux it does nothing.
#[allow(unsafe_code)]
fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: the descriptor is `file`'s, open for as long as the borrow; the call
        // reads no memory of ours.
        let _ = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Opens `path` without access-time updates where the system allows it: every read of
/// a file opened otherwise asks whether its access time needs updating (3% of a 10M-pair
/// ycsb-e's cycles went to that), and a database has no use for access times. Only the
/// file's owner (or a process with `CAP_FOWNER`) may ask for it, so where it is refused
/// the file is opened as usual.
fn open_noatime(opts: &OpenOptions, path: &Path) -> std::io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let noatime = rustix::fs::OFlags::NOATIME.bits() as i32;
        match opts.clone().custom_flags(noatime).open(path) {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => {}
            other => return other,
        }
    }
    opts.open(path)
}

impl VfsFile for RealFile {
    fn path(&self) -> &Path {
        &self.path
    }

    /// `mmap` of the first `len` bytes, read-only and shared (so it reads the page
    /// cache itself), advised `MADV_RANDOM`: a page that is not in memory is then read
    /// alone when touched, not with a read-ahead window around it. `None` if the file is
    /// shorter than `len` (touching a mapped page past the end would raise `SIGBUS`) or
    /// the kernel refuses the mapping.
    #[allow(unsafe_code)]
    fn map(&self, len: u64) -> Option<Mapped> {
        let size = usize::try_from(len).ok().filter(|&n| n > 0)?;
        if self.file.metadata().ok()?.len() < len {
            return None;
        }
        // SAFETY: `memmap2` hands out the mapping as `&[u8]`, which Rust assumes no one
        // changes. The caller of `VfsFile::map` promises that nothing in this process
        // writes, truncates or punches the first `len` bytes while the view lives (the
        // value log maps a segment only up to the end of its whole records: appends go
        // past that, open cuts a torn tail only past it, and GC unlinks a sealed segment
        // whole, whose pages the mapping keeps). The
        // database's lock file keeps other flexkv processes out of the directory; a
        // process that ignores it and rewrites a sealed segment breaks that promise. A
        // point read copies a value out before checking its checksum, so such a change
        // is caught as corruption rather than returned; a scan whose caller borrows its
        // pairs checks the value in place and hands out the mapping's bytes, which such
        // a process could change after the check (as with any engine that reads through
        // a mapping, LMDB's among them).
        let map = unsafe { memmap2::MmapOptions::new().len(size).map(&self.file) }.ok()?;
        // Only advice: a refusal changes how pages are read, not what.
        let _ = map.advise(memmap2::Advice::Random);
        Some(Mapped(Held::Mmap(map)))
    }

    /// `mmap` of the first `len` bytes, read-only and shared, whatever the file's
    /// length now (the mapping may reach past it), advised `MADV_RANDOM` as `map` is.
    fn map_window(&self, len: u64) -> Option<Window> {
        let size = usize::try_from(len).ok().filter(|&n| n > 0)?;
        // A raw mapping hands out no reference to its bytes: `Window::copy_to` copies
        // through a pointer, so bytes this process writes through the file change
        // nothing Rust assumes fixed. `Window`'s callers read only bytes the file has
        // (a page past its end would raise `SIGBUS`) and none that are being written.
        let map = memmap2::MmapOptions::new()
            .len(size)
            .map_raw_read_only(&self.file)
            .ok()?;
        // Only advice: a refusal changes how pages are read, not what.
        let _ = map.advise(memmap2::Advice::Random);
        Some(Window { map })
    }

    fn read_two_at(&self, head: &mut [u8], body: &mut [u8], offset: u64) -> Result<usize> {
        let total = head.len() + body.len();
        let n = loop {
            let mut bufs = [IoSliceMut::new(head), IoSliceMut::new(body)];
            match rustix::io::preadv(&self.file, &mut bufs, offset) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(Error::io("read", &self.path, e.into())),
            }
        };
        if n == total || n == 0 {
            return Ok(n);
        }
        // A short read (the end of the file, or a signal): the rest one buffer at a time.
        if n < head.len() {
            let m = self.read_at(&mut head[n..], offset + n as u64)?;
            if n + m < head.len() {
                return Ok(n + m);
            }
            Ok(head.len() + self.read_at(body, offset + head.len() as u64)?)
        } else {
            let k = n - head.len();
            Ok(n + self.read_at(&mut body[k..], offset + n as u64)?)
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read", &self.path, e)),
            }
        }
        Ok(done)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| Error::io("write", &self.path, e))
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> Result<()> {
        // Linux takes at most IOV_MAX (1024) slices per call.
        const IOV_MAX: usize = 1024;
        let mut offset = offset;
        let mut slices = Vec::with_capacity(bufs.len().min(IOV_MAX));
        for chunk in bufs.chunks(IOV_MAX) {
            slices.clear();
            slices.extend_from_slice(chunk);
            let mut rest = &mut slices[..];
            IoSlice::advance_slices(&mut rest, 0);
            while !rest.is_empty() {
                match rustix::io::pwritev(&self.file, rest, offset) {
                    Ok(0) => {
                        let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                        return Err(Error::io("write", &self.path, e));
                    }
                    // A short write (a signal, or a full disk about to say so): go on
                    // from where it stopped, as `write_all_at` does.
                    Ok(n) => {
                        offset += n as u64;
                        IoSlice::advance_slices(&mut rest, n);
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(Error::io("write", &self.path, e.into())),
                }
            }
        }
        Ok(())
    }

    fn append(&self, data: &[u8]) -> Result<u64> {
        let _serial = self.append_lock.lock();
        let end = self.len()?;
        self.write_at(data, end)?;
        Ok(end)
    }

    fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| Error::io("stat", &self.path, e))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| Error::io("set_len", &self.path, e))
    }

    /// Writes zeros from the file's end up to `len`. Not `fallocate`: that reserves
    /// *unwritten* extents, and the first write into each of their blocks converts it,
    /// a block-map change that the next `fdatasync` must write out and wait for before
    /// its cache flush (a sync that reached a new 4 KiB block took about 150 µs
    /// against 90 µs on this project's test machine). Zeros written through the page
    /// cache are allocated as ordinary blocks when first written back, and data written
    /// over them before that is all that ever reaches the device.
    fn allocate(&self, len: u64) -> Result<()> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let from = self.len()?;
        let mut slices = Vec::new();
        let mut at = from;
        while at < len {
            let n = (len - at).min(ZEROS.len() as u64) as usize;
            slices.push(IoSlice::new(&ZEROS[..n]));
            at += n as u64;
        }
        self.write_vectored_at(&slices, from)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        fallocate(
            &self.file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            len,
        )
        .map_err(|e| Error::io("punch_hole", &self.path, e.into()))
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        start_writeback(&self.file, offset, len);
    }

    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("sync", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vfs_in_tempdir() -> (tempfile::TempDir, RealVfs) {
        (tempfile::tempdir().unwrap(), RealVfs)
    }

    /// A new empty file in a fresh temporary directory (kept alive by the first).
    fn new_file_in_tempdir() -> (tempfile::TempDir, Arc<dyn VfsFile>) {
        let (dir, vfs) = vfs_in_tempdir();
        let f = vfs
            .open(&dir.path().join("f"), OpenMode::CreateNew)
            .unwrap();
        (dir, f)
    }

    /// A new file in `dir` on the real file system, and one in memory: the trait's
    /// default methods, which the in-memory file system uses, are the reference for
    /// the real file system's own.
    fn real_and_memory_files(dir: &Path) -> (Arc<dyn VfsFile>, Arc<dyn VfsFile>) {
        let real = RealVfs.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
        let fault = crate::io::FaultVfs::new(1);
        fault.create_dir_all(Path::new("/d")).unwrap();
        let mem = fault.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
        (real, mem)
    }

    /// A mapping shows the file's first bytes, on the real file system and in memory
    /// alike; it is refused for more bytes than the file holds (touching a mapped page
    /// past the end would be `SIGBUS`) and for none; the file growing past it later
    /// leaves what it shows alone.
    #[test]
    fn a_mapping_shows_the_first_bytes_and_never_more_than_the_file_holds() {
        let (dir, _vfs) = vfs_in_tempdir();
        let (real, mem) = real_and_memory_files(dir.path());
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for f in [&real, &mem] {
            f.write_at(&data, 0).unwrap();
            let m = f.map(6_000).expect("a mapping of written bytes");
            assert_eq!(&m[..], &data[..6_000], "{}", f.path().display());
            assert_eq!(&f.map(10_000).unwrap()[..], &data[..]);
            assert!(f.map(10_001).is_none(), "past the end");
            assert!(f.map(0).is_none(), "nothing to map");
            f.write_at(b"more", 10_000).unwrap();
            assert_eq!(&m[..], &data[..6_000]);
        }
    }

    /// One `preadv` into two buffers reads what two `pread`s would, at the end of the
    /// file too (the trait's default, which the in-memory file system uses, is the
    /// reference).
    #[test]
    fn reading_into_two_buffers_matches_two_reads() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..100u8).collect();
        let (real, mem) = real_and_memory_files(dir.path());
        real.append(&data).unwrap();
        mem.append(&data).unwrap();
        // (head, body, offset): inside, ending exactly at the end, past it in the body,
        // past it in the head, at the end, and an empty body.
        for (h, b, at) in [
            (10, 20, 5),
            (10, 20, 70),
            (5, 20, 90),
            (10, 20, 93),
            (4, 4, 100),
            (7, 0, 3),
        ] {
            let mut got = (vec![0xAA; h], vec![0xAA; b]);
            let mut want = (vec![0xAA; h], vec![0xAA; b]);
            let n = real.read_two_at(&mut got.0, &mut got.1, at).unwrap();
            let m = mem.read_two_at(&mut want.0, &mut want.1, at).unwrap();
            assert_eq!((n, &got), (m, &want), "head {h}, body {b}, at {at}");
            assert_eq!(n, (h + b).min(100 - at as usize));
            let end = (at as usize + h).min(100);
            assert_eq!(got.0[..end - at as usize], data[at as usize..end]);
        }
    }

    /// One `pwritev` per 1,024 slices, resumed where each left off, writes what one
    /// `write_at` of the slices' concatenation writes (the trait's default, which the
    /// in-memory file system uses, is the reference): past the end, and over bytes
    /// already there.
    #[test]
    fn writing_many_slices_matches_writing_their_concatenation() {
        let dir = tempfile::tempdir().unwrap();
        let (real, mem) = real_and_memory_files(dir.path());
        // 2,500 pieces of 0..=40 bytes (some empty, one run of empties across a chunk
        // boundary), so that the slices span three calls.
        let pieces: Vec<Vec<u8>> = (0..2_500u32)
            .map(|i| {
                let len = if (1_020..1_030).contains(&i) {
                    0
                } else {
                    (i * 7 % 41) as usize
                };
                vec![(i % 251) as u8; len]
            })
            .collect();
        let whole: Vec<u8> = pieces.concat();
        let slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let mut want = vec![0u8; 13];
        want.extend_from_slice(&whole);
        for f in [&real, &mem] {
            f.write_vectored_at(&slices, 13).unwrap();
            let mut got = vec![0xAA; want.len()];
            f.read_exact_at(&mut got, 0).unwrap();
            assert_eq!(got, want, "{}", f.path().display());
            assert_eq!(f.len().unwrap(), want.len() as u64);
        }
        // Over what is there, not to the end.
        let over = [
            IoSlice::new(b"abc"),
            IoSlice::new(b""),
            IoSlice::new(b"defg"),
        ];
        want[20..27].copy_from_slice(b"abcdefg");
        for f in [&real, &mem] {
            f.write_vectored_at(&over, 20).unwrap();
            let mut got = vec![0xAA; want.len()];
            f.read_exact_at(&mut got, 0).unwrap();
            assert_eq!(got, want, "{}", f.path().display());
        }
    }

    #[test]
    fn positional_io_append_and_len() {
        let (dir, vfs) = vfs_in_tempdir();
        let path = dir.path().join("f");
        let f = vfs.open(&path, OpenMode::CreateNew).unwrap();
        assert_eq!(f.append(b"hello").unwrap(), 0);
        assert_eq!(f.append(b" world").unwrap(), 5);
        f.write_at(b"J", 6).unwrap();
        let mut buf = [0u8; 11];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"hello Jorld");
        assert_eq!(f.len().unwrap(), 11);
        // Short read only at the end; read_exact_at past the end is UnexpectedEof.
        let mut big = [0u8; 20];
        assert_eq!(f.read_at(&mut big, 0).unwrap(), 11);
        match f.read_exact_at(&mut big, 0) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::UnexpectedEof)
            }
            other => panic!("expected UnexpectedEof, got {other:?}"),
        }
        f.sync().unwrap();
        f.set_len(3).unwrap();
        assert_eq!(f.len().unwrap(), 3);
    }

    /// A read leaves the file's access time alone. An access time two days old is one a
    /// `relatime` mount (the usual default) would update on the next read; on a mount
    /// that never updates access times this holds either way.
    #[cfg(target_os = "linux")]
    #[test]
    fn reads_do_not_update_the_access_time() {
        use std::time::{Duration, SystemTime};
        let (dir, vfs) = vfs_in_tempdir();
        let path = dir.path().join("f");
        let old = SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
        {
            let f = vfs.open(&path, OpenMode::CreateNew).unwrap();
            f.append(b"some bytes").unwrap();
            f.sync().unwrap();
        }
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_times(fs::FileTimes::new().set_accessed(old))
            .unwrap();
        let atime = || fs::metadata(&path).unwrap().accessed().unwrap();
        assert_eq!(atime(), old);
        let f = vfs.open(&path, OpenMode::Existing).unwrap();
        let mut buf = [0u8; 4];
        f.read_exact_at(&mut buf, 2).unwrap();
        assert_eq!(&buf, b"me b");
        assert_eq!(atime(), old, "the read updated the access time");
    }

    #[test]
    fn open_modes_are_enforced() {
        let (dir, vfs) = vfs_in_tempdir();
        let path = dir.path().join("f");
        assert!(matches!(
            vfs.open(&path, OpenMode::Existing),
            Err(Error::Io { op: "open", .. })
        ));
        vfs.open(&path, OpenMode::CreateNew).unwrap();
        assert!(vfs.open(&path, OpenMode::CreateNew).is_err());
        vfs.open(&path, OpenMode::Existing).unwrap();
        vfs.open(&path, OpenMode::Create).unwrap();
    }

    #[test]
    fn starting_write_back_leaves_the_bytes_and_the_length_as_written() {
        let (_dir, f) = new_file_in_tempdir();
        let data: Vec<u8> = (0..5u32 << 20).map(|i| (i % 251) as u8).collect();
        f.write_at(&data, 0).unwrap();
        f.start_writeback(0, 4 << 20);
        // Past the end, and past what the system call can take: nothing happens.
        f.start_writeback(4 << 20, 16 << 20);
        f.start_writeback(u64::MAX - 1, 2);
        let mut back = vec![0; data.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data, "the bytes changed");
        assert_eq!(f.len().unwrap(), data.len() as u64);
        f.sync().unwrap();
    }

    #[test]
    fn allocate_extends_with_zeros_and_keeps_data() {
        let (_dir, f) = new_file_in_tempdir();
        f.write_at(b"head", 0).unwrap();
        f.allocate(1 << 20).unwrap();
        assert_eq!(f.len().unwrap(), 1 << 20);
        let mut buf = vec![1u8; 8];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"head\0\0\0\0");
        f.read_exact_at(&mut buf, (1 << 20) - 8).unwrap();
        assert_eq!(buf, [0u8; 8]);
        f.allocate(16).unwrap(); // never shrinks
        assert_eq!(f.len().unwrap(), 1 << 20);
    }

    #[test]
    fn punch_hole_reads_zeros_and_keeps_length() {
        let (_dir, f) = new_file_in_tempdir();
        f.write_at(&vec![7u8; 64 * 1024], 0).unwrap();
        f.punch_hole(4096, 8192).unwrap();
        assert_eq!(f.len().unwrap(), 64 * 1024);
        let mut buf = vec![1u8; 8192];
        f.read_exact_at(&mut buf, 4096).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let mut tail = [0u8; 1];
        f.read_exact_at(&mut tail, 12288).unwrap();
        assert_eq!(tail[0], 7);
    }

    #[test]
    fn rename_remove_list_and_sync_dir() {
        let (dir, vfs) = vfs_in_tempdir();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        vfs.open(&a, OpenMode::CreateNew)
            .unwrap()
            .append(b"x")
            .unwrap();
        vfs.create_dir_all(&dir.path().join("sub/deeper")).unwrap();
        assert_eq!(vfs.list(dir.path()).unwrap(), vec!["a".to_string()]);
        vfs.rename(&a, &b).unwrap();
        vfs.sync_dir(dir.path()).unwrap();
        assert!(!vfs.exists(&a).unwrap());
        assert!(vfs.exists(&b).unwrap());
        vfs.remove(&b).unwrap();
        assert!(vfs.list(dir.path()).unwrap().is_empty());
        assert!(vfs.remove(&b).is_err());
    }

    #[test]
    fn a_second_lock_fails_until_the_first_is_dropped() {
        let (dir, vfs) = vfs_in_tempdir();
        let path = dir.path().join("LOCK");
        let first = vfs.lock(&path).unwrap();
        assert!(matches!(vfs.lock(&path), Err(Error::Locked(p)) if p == path));
        assert!(matches!(vfs.lock_shared(&path), Err(Error::Locked(_))));
        drop(first);
        vfs.lock(&path).unwrap();
    }

    #[test]
    fn shared_locks_exclude_an_exclusive_one_and_not_each_other() {
        let (dir, vfs) = vfs_in_tempdir();
        let path = dir.path().join("LOCK");
        assert!(
            vfs.lock_shared(&path).is_err(),
            "a shared lock made its file"
        );
        drop(vfs.lock(&path).unwrap());
        let a = vfs.lock_shared(&path).unwrap();
        let b = vfs.lock_shared(&path).unwrap();
        assert!(matches!(vfs.lock(&path), Err(Error::Locked(_))));
        drop(a);
        assert!(matches!(vfs.lock(&path), Err(Error::Locked(_))));
        drop(b);
        vfs.lock(&path).unwrap();
    }
}
