//! The one error type of flexkv.
//!
//! Every fallible call in the crate returns [`Result<T>`]. Errors say what went wrong in
//! terms a caller can act on: bad input is [`Error::InvalidArgument`] (and nothing was
//! changed), bytes that fail a check are [`Error::Corruption`] with the file and offset,
//! and anything the operating system refused is [`Error::Io`] with the operation and path.

use std::fmt;
use std::path::PathBuf;

/// The result type used throughout flexkv.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in flexkv.
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// The operating system (or the fault-injecting file system) failed an operation.
    Io {
        /// What was being done: `"open"`, `"read"`, `"sync"`, ...
        op: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Bytes on disk failed a check: a checksum, a magic number, a length out of bounds.
    Corruption {
        /// The file that holds the bad bytes.
        file: PathBuf,
        /// Where in the file the bad bytes start.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// The caller passed an argument outside what the call accepts; nothing was changed.
    InvalidArgument(String),
    /// Another owner holds the lock on this path (another process, or another open handle).
    Locked(PathBuf),
    /// A configured size limit leaves no room for the write; nothing was changed.
    NoSpace(String),
    /// An earlier write or sync failed (or a background thread panicked, see
    /// [`Error::Panicked`]), so what is on disk is unknown; writes are refused until the
    /// store is reopened (which recovers from what is durable).
    Poisoned,
    /// The handle was closed ([`Db::close`](crate::Db::close)); open the database again.
    Closed,
    /// The database was opened read-only ([`Builder::read_only`](crate::Builder::read_only)):
    /// a write, a sync, a flush, a GC pass or a new keyspace was refused, and nothing
    /// was changed. What is being refused is named (an operation, or a file).
    ReadOnly(String),
    /// A background thread (the committer or the value-log GC) panicked: a bug in flexkv,
    /// or in the [`Vfs`](crate::io::Vfs) it was given. What the thread was changing may
    /// be half made, so from then on writes, and reads that reach the sorted keyspace
    /// (anything not in a memtable), return [`Error::Poisoned`], and
    /// [`Db::close`](crate::Db::close) returns this error; reopening recovers from what
    /// is durable, which holds every write acknowledged before the panic.
    Panicked {
        /// Which thread: `"committer"` or `"GC"`.
        thread: &'static str,
        /// The panic's message.
        message: String,
    },
    /// The directory exists but does not hold a flexkv database; nothing was changed.
    NotADatabase {
        /// The directory.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// A file was written by a newer flexkv whose format this build does not know;
    /// nothing was changed.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The format version in the file.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
}

impl Error {
    /// Wraps an I/O error with the operation and path it came from.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corruption`]: `reason` for the bytes at `offset` of `file`.
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// A copy of this error for a second receiver (a group-commit leader tells every
    /// member of its group why the group failed). I/O errors keep their kind and text.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io { op, path, source } => Error::Io {
                op,
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption {
                file,
                offset,
                reason,
            } => Error::corruption(file.clone(), *offset, reason.clone()),
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::Locked(p) => Error::Locked(p.clone()),
            Error::NoSpace(m) => Error::NoSpace(m.clone()),
            Error::Poisoned => Error::Poisoned,
            Error::Closed => Error::Closed,
            Error::ReadOnly(m) => Error::ReadOnly(m.clone()),
            Error::Panicked { thread, message } => Error::Panicked {
                thread,
                message: message.clone(),
            },
            Error::NotADatabase { path, reason } => Error::NotADatabase {
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::UnsupportedVersion {
                path,
                found,
                supported,
            } => Error::UnsupportedVersion {
                path: path.clone(),
                found: *found,
                supported: *supported,
            },
        }
    }

    /// Builds an [`Error::InvalidArgument`] from anything printable.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "I/O error during {op} on {}: {source}", path.display())
            }
            Error::Corruption {
                file,
                offset,
                reason,
            } => write!(
                f,
                "corruption in {} at offset {offset}: {reason}",
                file.display()
            ),
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::Locked(path) => write!(
                f,
                "{} is locked by another owner (another process or open handle)",
                path.display()
            ),
            Error::NoSpace(msg) => write!(f, "no space: {msg}"),
            Error::Poisoned => f.write_str(
                "an earlier write or sync failed (or a background thread panicked); \
                 reopen to recover from what is durable",
            ),
            Error::Closed => f.write_str("the database was closed; open it again"),
            Error::ReadOnly(what) => write!(f, "the database is open read-only: {what}"),
            Error::Panicked { thread, message } => write!(
                f,
                "flexkv's {thread} thread panicked ({message}); reopen to recover from \
                 what is durable"
            ),
            Error::NotADatabase { path, reason } => write!(
                f,
                "{} is not a flexkv database ({reason}); nothing was changed",
                path.display()
            ),
            Error::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}, newer than this build reads ({supported}); \
                 nothing was changed",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
