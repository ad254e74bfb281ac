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
        let file = match mode {
            OpenMode::CreateNew => None,
            _ => Some(self.inner.open(path, OpenMode::ReadOnly)?),
        };
        Ok(Arc::new(ReadOnlyFile {
            path: path.to_path_buf(),
            file,
        }))
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

    /// A shared lock, on an existing lock file: read-only handles exclude a writer, and
    /// not each other.
    fn lock(&self, path: &Path) -> Result<FileLock> {
        self.inner.lock_shared(path)
    }

    fn read_only(&self) -> bool {
        true
    }
}

/// A file of a [`ReadOnlyVfs`]: reads go through, changes fail. Without a `file`, it
/// is one a read-only database would have created: empty.
#[derive(Debug)]
struct ReadOnlyFile {
    path: PathBuf,
    file: Option<Arc<dyn VfsFile>>,
}

impl VfsFile for ReadOnlyFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        match &self.file {
            Some(f) => f.read_at(buf, offset),
            None => Ok(0),
        }
    }

    fn write_at(&self, _data: &[u8], _offset: u64) -> Result<()> {
        Err(refused("writing", &self.path))
    }

    fn append(&self, _data: &[u8]) -> Result<u64> {
        Err(refused("writing", &self.path))
    }

    fn len(&self) -> Result<u64> {
        self.file.as_ref().map_or(Ok(0), |f| f.len())
    }

    fn set_len(&self, _len: u64) -> Result<()> {
        Err(refused("resizing", &self.path))
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> Result<()> {
        Err(refused("punching a hole in", &self.path))
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn allocate(&self, _len: u64) -> Result<()> {
        Err(refused("allocating in", &self.path))
    }

    fn start_writeback(&self, _offset: u64, _len: u64) {}

    fn read_two_at(&self, head: &mut [u8], body: &mut [u8], offset: u64) -> Result<usize> {
        match &self.file {
            Some(f) => f.read_two_at(head, body, offset),
            None => Ok(0),
        }
    }

    fn map(&self, len: u64) -> Option<Mapped> {
        self.file.as_ref()?.map(len)
    }

    fn map_window(&self, len: u64) -> Option<Window> {
        self.file.as_ref()?.map_window(len)
    }
}
