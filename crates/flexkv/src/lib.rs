//! flexkv: a persistent key-value storage engine that keeps data sorted in place.
//!
//! The engine is built from published designs, one component each (see
//! `docs/design.md`). What exists so far:
//!
//! - [`io`]: the file-system layer ([`io::Vfs`]), with the real file system and a
//!   fault-injecting one for crash tests.
//! - [`flextree`]: FlexTree, the in-memory extent index with O(log n) insert-range and
//!   collapse-range that the flexible address space is built on.
#![deny(unsafe_code)]

mod checksum;
mod db;
mod error;
pub mod flextree;
pub mod io;
mod keyorder;
mod le;
mod prefetch;
pub mod sorted;
pub mod space;
mod spin;

pub use db::{
    Builder, CheckReport, Db, Durability, GcOptions, GcReport, Iter, Keys, Keyspace, KeyspaceKind,
    LazyIter, LazyValue, Options, Snapshot, Stats, WalRecovery, WriteBatch, MAX_BATCH_BYTES,
    MAX_BATCH_OPS, MAX_INLINE_VALUE, MAX_KEYSPACE_NAME_LEN, MAX_KEY_LEN, MAX_SCAN_READ_THREADS,
    MAX_VALUE_LEN,
};
#[doc(hidden)]
pub use db::{GcHook, GcStep};
pub use error::{Error, Result};
pub(crate) mod memtable;
pub(crate) mod mvcc;
pub mod vlog;
pub(crate) mod wal;
