//! A file system that reads and refuses every change: what a database opened
//! read-only ([`Builder::read_only`](crate::Builder::read_only)) sees.
//!
//! Recovery asks [`Vfs::read_only`] and then changes nothing of its own accord (it
//! replays a torn log up to the tear, and neither cuts it nor starts a new one); this
//! layer makes sure nothing else does either: every file is opened for reading only
//! (so a read-only mount or read-only files open too), a write, a length change, a
//! punched hole, a rename or a removal fails with [`Error::ReadOnly`], and a sync,
//! which has nothing to make durable, does nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{FileLock, Mapped, OpenMode, Vfs, VfsFile, Window};
use crate::{Error, Result};

/// [`Vfs`] `inner`, read-only. See the [module documentation](self).
#[derive(Debug)]
pub(crate) struct ReadOnlyVfs {
    inner: Arc<dyn Vfs>,
}

impl ReadOnlyVfs {
    pub(crate) fn new(inner: Arc<dyn Vfs>) -> ReadOnlyVfs {
        ReadOnlyVfs { inner }
    }
}

fn refused(what: &str, path: &Path) -> Error {
    Error::ReadOnly(format!("{what} {}", path.display()))
}

impl Vfs for ReadOnlyVfs {
    /// Opens an existing file for reading. A file to be created (`CreateNew`: the WAL
    /// segment or value-log segment an open would start) is not: it stands as an
    /// empty file that refuses writes, and nothing is made on disk.
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn VfsFile>> {
        if mode == OpenMode::CreateNew {
            return Ok(Arc::new(Unwritten(path.to_path_buf())));
        }
        let file = self.inner.open(path, OpenMode::ReadOnly)?;
        Ok(Arc::new(ReadOnlyFile { file }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }

    fn rename(&self, from: &Path, _to: &Path) -> Result<()> {
        Err(refused("renaming", from))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        Err(refused("removing", path))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        match self.inner.exists(dir)? {
            true => Ok(()),
            false => Err(refused("creating", dir)),
        }
    }

    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<FileLock> {
        if !self.inner.exists(path)? {
            return Err(refused("creating", path));
        }
        self.inner.lock(path)
    }

    fn read_only(&self) -> bool {
        true
    }
}

/// A file of a [`ReadOnlyVfs`]: reads go through, changes fail.
#[derive(Debug)]
struct ReadOnlyFile {
    file: Arc<dyn VfsFile>,
}

impl VfsFile for ReadOnlyFile {
    fn path(&self) -> &Path {
        self.file.path()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, _data: &[u8], _offset: u64) -> Result<()> {
        Err(refused("writing", self.path()))
    }

    fn append(&self, _data: &[u8]) -> Result<u64> {
        Err(refused("writing", self.path()))
    }

    fn len(&self) -> Result<u64> {
        self.file.len()
    }

    fn set_len(&self, _len: u64) -> Result<()> {
        Err(refused("resizing", self.path()))
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> Result<()> {
        Err(refused("punching a hole in", self.path()))
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn allocate(&self, _len: u64) -> Result<()> {
        Err(refused("allocating in", self.path()))
    }

    fn start_writeback(&self, _offset: u64, _len: u64) {}

    fn read_two_at(&self, head: &mut [u8], body: &mut [u8], offset: u64) -> Result<usize> {
        self.file.read_two_at(head, body, offset)
    }

    fn map(&self, len: u64) -> Option<Mapped> {
        self.file.map(len)
    }

    fn map_window(&self, len: u64) -> Option<Window> {
        self.file.map_window(len)
    }
}

/// A file a read-only database would have created: empty, and refusing writes.
#[derive(Debug)]
struct Unwritten(PathBuf);

impl VfsFile for Unwritten {
    fn path(&self) -> &Path {
        &self.0
    }

    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> Result<usize> {
        Ok(0)
    }

    fn write_at(&self, _data: &[u8], _offset: u64) -> Result<()> {
        Err(refused("writing", &self.0))
    }

    fn append(&self, _data: &[u8]) -> Result<u64> {
        Err(refused("writing", &self.0))
    }

    fn len(&self) -> Result<u64> {
        Ok(0)
    }

    fn set_len(&self, _len: u64) -> Result<()> {
        Err(refused("resizing", &self.0))
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> Result<()> {
        Err(refused("punching a hole in", &self.0))
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn allocate(&self, _len: u64) -> Result<()> {
        Err(refused("allocating in", &self.0))
    }
}
