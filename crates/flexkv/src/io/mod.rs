//! The only place in flexkv that touches files.
//!
//! Every component reaches the disk through a [`Vfs`] (a file system) and the
//! [`VfsFile`]s it opens. Two implementations exist:
//!
//! - [`RealVfs`]: the operating system's file system (positional I/O, `fdatasync`,
//!   `fallocate` hole punching, `flock` locks).
//! - [`FaultVfs`]: an in-memory file system for tests that remembers what was synced
//!   and can [`crash`](FaultVfs::crash) into any state a disk could hold after a power
//!   cut, or fail the n-th operation.
//!
//! The contract both keep, and that every component relies on:
//! - `write_at` / `write_vectored_at` / `append` / `set_len` / `punch_hole` reach the
//!   device only after `sync` of that file returns `Ok`.
//! - Creating, renaming or removing a file reaches the device only after `sync_dir` of
//!   its directory returns `Ok` (a synced file whose name was never made durable can
//!   vanish in a crash).
//! - A failed operation changed nothing that a later successful `sync` would not also
//!   have to re-do; callers treat a failed `sync` as fatal for what it covered.
//! - A [`Mapped`] view ([`VfsFile::map`]) is only taken of bytes that nothing writes,
//!   truncates or punches out while the view lives.
//! - A [`Window`] ([`VfsFile::map_window`]) is read only at bytes the file has, and
//!   only while nothing writes them.

mod fault;
mod readonly;
mod real;

pub use fault::{CrashMode, FaultVfs};
pub(crate) use readonly::ReadOnlyVfs;
pub use real::RealVfs;

use std::fmt;
use std::io::IoSlice;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use crate::{Error, Result};

/// How [`Vfs::open`] treats a file that does or does not exist. Files are opened for
/// reading and writing, except with `ReadOnly`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Open the file if it exists, create it empty if it does not.
    Create,
    /// Create the file; fail if it already exists.
    CreateNew,
    /// Open an existing file; fail if it does not exist.
    Existing,
    /// Open an existing file for reading only (a database opened read-only, on a
    /// read-only mount too); fail if it does not exist.
    ReadOnly,
}

/// A file system: the directory operations of flexkv.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Opens (or creates, by `mode`) the file at `path` for reading and writing.
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn VfsFile>>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> Result<bool>;
    /// Atomically renames `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes the file at `path`.
    fn remove(&self, path: &Path) -> Result<()>;
    /// The names of the files in `dir`, sorted.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Makes every create, rename and remove done so far in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Takes an exclusive lock on the file at `path` (created if missing), held until
    /// the returned guard is dropped. Fails with [`Error::Locked`] if anyone else holds it.
    fn lock(&self, path: &Path) -> Result<FileLock>;
    /// Takes a shared lock on the existing file at `path`: any number of shared locks
    /// are held at once, and none beside an exclusive one ([`Vfs::lock`]), so readers
    /// exclude a writer and not each other. Fails with [`Error::Locked`] if anyone holds
    /// the exclusive lock. The default takes the exclusive one, which excludes more.
    fn lock_shared(&self, path: &Path) -> Result<FileLock> {
        self.lock(path)
    }
    /// Whether this file system refuses every change (a database opened read-only):
    /// recovery then replays what it finds without cutting, truncating or starting
    /// anything.
    fn read_only(&self) -> bool {
        false
    }
}

/// How many bytes an append-only writer (the space's segments, the value log) lets
/// pile up before it starts their write-back ([`VfsFile::start_writeback`]), as
/// RocksDB's `bytes_per_sync` does. Without it, a commit's sync found everything the
/// commit wrote still in memory and waited while the device took it all: a 1M-pair
/// SYS `fillseq` (64 MiB per commit) had its writer waiting 0.55 s of 0.9 s for those
/// syncs. Started early, the write-back runs while the writer goes on, and the sync
/// waits for the rest. 4 MiB (a space segment) was faster than 256 KiB, 1 MiB and
/// 16 MiB (docs/benchmarks.md, fifty-fifth session).
pub(crate) const WRITEBACK_EVERY: u64 = 4 << 20;

/// Checks the write-backs started on a file as it grew (`starts`, from
/// [`FaultVfs::writebacks`]): each covers what was appended since the one before, from
/// the file's start, ending where the file ended when it was started (`ends`), so at
/// least [`WRITEBACK_EVERY`] bytes and less than that plus `slack` (one append's
/// bytes). Returns where the last one ends.
#[cfg(test)]
pub(crate) fn assert_writeback_steps(starts: &[(u64, u64)], ends: &[u64], slack: u64) -> u64 {
    let mut from = 0;
    for (&(offset, len), &upto) in starts.iter().zip(ends) {
        assert_eq!((offset, offset + len), (from, upto));
        assert!(
            (WRITEBACK_EVERY..WRITEBACK_EVERY + slack).contains(&len),
            "{len}"
        );
        from = upto;
    }
    from
}

/// An open file. All offsets are absolute (positional I/O); handles are shared between
/// threads freely.
pub trait VfsFile: Send + Sync + fmt::Debug {
    /// The path the file was opened at.
    fn path(&self) -> &Path;
    /// Reads into `buf` from `offset`; returns how many bytes were read, which is fewer
    /// than `buf.len()` only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize>;
    /// Writes all of `data` at `offset`, extending the file if needed.
    fn write_at(&self, data: &[u8], offset: u64) -> Result<()>;
    /// Writes the slices of `bufs` one after another from `offset`, as one write: what
    /// [`VfsFile::write_at`] of their concatenation does, without the caller copying
    /// them into one buffer first. The default concatenates them and calls `write_at`
    /// (so a file system with write semantics of its own, such as the fault-injecting
    /// one, sees exactly one write).
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> Result<()> {
        let mut data = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
        for b in bufs {
            data.extend_from_slice(b);
        }
        self.write_at(&data, offset)
    }
    /// Writes all of `data` at the current end of the file and returns the offset it was
    /// written at. Appends through one handle are serialized with each other.
    fn append(&self, data: &[u8]) -> Result<u64>;
    /// The file's current length in bytes.
    fn len(&self) -> Result<u64>;
    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;
    /// Deallocates `[offset, offset + len)`; the range then reads as zeros and the file
    /// length is unchanged.
    fn punch_hole(&self, offset: u64, len: u64) -> Result<()>;
    /// Makes everything written to this file so far durable.
    fn sync(&self) -> Result<()>;

    /// Extends the file with zeros to at least `len` bytes, so that later writes inside
    /// `len` are overwrites: they change neither the file's size nor (once the zeros
    /// have been written back) its block map, and their `fdatasync` then writes data
    /// and flushes, with no metadata write in between. A hint: a file system may do
    /// nothing (the in-memory ones do).
    fn allocate(&self, len: u64) -> Result<()> {
        let _ = len;
        Ok(())
    }

    /// Asks the system to start writing `[offset, offset + len)` back to the device now,
    /// without waiting for it, so that a later [`sync`](Self::sync) finds less to
    /// write and wait for. Only a hint: it promises nothing about durability (a crash
    /// may keep or lose any of these bytes until `sync` returns), and a failure is
    /// ignored, since a write-back that goes wrong is reported by the `sync` after it.
    fn start_writeback(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }

    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Reads into `head`, then `body`, from `offset` (a record's header and its value
    /// into buffers of their own); returns how many bytes were read in all, which is
    /// fewer than both lengths only at the end of the file. One read where the file
    /// system can: a value from the device then costs one request, not two.
    fn read_two_at(&self, head: &mut [u8], body: &mut [u8], offset: u64) -> Result<usize> {
        let n = self.read_at(head, offset)?;
        if n < head.len() {
            return Ok(n);
        }
        Ok(n + self.read_at(body, offset + n as u64)?)
    }

    /// A read-only view of the file's first `len` bytes in memory, or `None` where the
    /// file system offers none (the default) or the file is shorter than `len`.
    ///
    /// The caller promises that those bytes are not written, truncated away or punched
    /// out while the view lives (a value-log segment's whole records). Reading through the view
    /// makes no call on this file: it is not counted, and no fault is injected into it.
    fn map(&self, len: u64) -> Option<Mapped> {
        let _ = len;
        None
    }

    /// A read-only mapping of the file's first `len` bytes that may reach past its
    /// end and sees the file as it changes ([`Window`]), or `None` where the file
    /// system offers none (the default, and the in-memory one: its reads must stay
    /// operations it can count and fail).
    fn map_window(&self, len: u64) -> Option<Window> {
        let _ = len;
        None
    }

    /// Reads exactly `buf.len()` bytes from `offset`; reaching the end of the file first
    /// is an [`Error::Io`] of kind `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                let eof = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "wanted {} bytes at offset {offset}, the file ends after {done}",
                        buf.len()
                    ),
                );
                return Err(Error::io("read", self.path(), eof));
            }
            done += n;
        }
        Ok(())
    }
}

/// A read-only view of a file's bytes in memory, from [`VfsFile::map`]: on the real file
/// system the page cache's pages mapped into the process (`mmap`), so a read through it
/// is a copy out of memory, with no system call and no buffer to fill first; on the
/// in-memory one a copy of the bytes.
pub struct Mapped(Held);

enum Held {
    Mmap(memmap2::Mmap),
    Copy(Box<[u8]>),
}

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Held::Mmap(m) => m,
            Held::Copy(b) => b,
        }
    }
}

impl fmt::Debug for Mapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapped").field("len", &self.len()).finish()
    }
}

/// A shared read-only mapping of a file's first bytes, possibly reaching past its end
/// ([`VfsFile::map_window`]): a file that grows in place (the FlexSpace data file) is
/// read through it with no system call, as the page cache holds it, writes made
/// through the file included.
///
/// Whoever reads through it keeps two rules. Only bytes the file has are read: a page
/// wholly past the file's end raises `SIGBUS` when touched. And nothing writes the
/// bytes while they are copied out: the copy is then the bytes as written.
pub struct Window {
    map: memmap2::MmapRaw,
}

impl Window {
    /// How many bytes from the file's start the window spans.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Whether the window spans nothing.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Asks the processor for the cache lines of the `len` bytes at `at` (a hint: it
    /// reads nothing, and a page not mapped yet is skipped).
    pub fn prefetch(&self, at: u64, len: usize) {
        if at.saturating_add(len as u64) <= self.len() {
            crate::prefetch::prefetch_bytes(self.map.as_ptr().wrapping_add(at as usize), len);
        }
    }

    /// Copies the `out.len()` bytes at `at` into `out`; `false` (nothing copied) where
    /// the window does not span them all. The caller keeps the rules above.
    #[allow(unsafe_code)]
    pub fn copy_to(&self, at: u64, out: &mut [u8]) -> bool {
        let Some(end) = at.checked_add(out.len() as u64) else {
            return false;
        };
        if end > self.len() {
            return false;
        }
        // SAFETY: `at..end` lies inside the mapping (checked above), which lives as
        // long as `self`; `out` is a distinct buffer of the same length. A raw copy
        // takes no reference to the mapping, whose bytes may change between copies
        // (the caller makes sure not during one).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(at as usize),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        true
    }
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window").field("len", &self.len()).finish()
    }
}

/// A family of numbered files in one directory, `PREFIX` + eight decimal digits +
/// `SUFFIX` (WAL and value-log segments), so names sort in number order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Numbered {
    pub(crate) prefix: &'static str,
    pub(crate) suffix: &'static str,
}

impl Numbered {
    /// The file name of number `id`.
    pub(crate) fn name(self, id: u32) -> String {
        format!("{}{id:08}{}", self.prefix, self.suffix)
    }

    /// The number in `name`, if it belongs to this family.
    pub(crate) fn parse(self, name: &str) -> Option<u32> {
        name.strip_prefix(self.prefix)?
            .strip_suffix(self.suffix)?
            .parse()
            .ok()
    }
}

/// An exclusive lock taken by [`Vfs::lock`]; released when dropped.
pub struct FileLock {
    _guard: Box<dyn Send + Sync>,
}

impl FileLock {
    fn new(guard: impl Send + Sync + 'static) -> Self {
        FileLock {
            _guard: Box::new(guard),
        }
    }
}

impl fmt::Debug for FileLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FileLock")
    }
}
