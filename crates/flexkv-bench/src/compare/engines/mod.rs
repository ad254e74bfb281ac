//! The adapter every engine implements, and the list of engines this build has.
//!
//! Each adapter is configured for the same durability (a write-ahead log on, no sync per
//! write, one sync at the end of each phase through [`Engine::sync`]), the same cache
//! budget, and no compression; [`EngineKind::configuration`] says how, in words printed
//! with the results.

#[cfg(feature = "fjall")]
mod fjall;
mod flexkv;
#[cfg(feature = "lmdb")]
mod lmdb;
#[cfg(feature = "redb")]
mod redb;
#[cfg(feature = "rocksdb")]
mod rocksdb;
#[cfg(feature = "sled")]
mod sled;

use std::path::Path;

/// An engine's failure, as text (each engine has its own error type).
pub type EngineResult<T = ()> = Result<T, String>;

/// One write of a batch.
pub enum Op<'a> {
    /// Set a key to a value.
    Put(&'a [u8], &'a [u8]),
    /// Remove a key.
    Delete(&'a [u8]),
}

/// What the harness needs of an engine. Every method may be called from many threads.
pub trait Engine: Send + Sync {
    /// Applies the writes atomically, without waiting for them to be durable.
    fn write(&self, ops: &[Op<'_>]) -> EngineResult;
    /// Copies the value of `key` into `out`; false if the key is missing.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EngineResult<bool>;
    /// Reads up to `n` pairs from the first key ≥ `start`, touching every value byte;
    /// returns the pairs read.
    fn scan(&self, start: &[u8], n: usize) -> EngineResult<usize>;
    /// Makes every write so far durable.
    fn sync(&self) -> EngineResult;
    /// Closes the engine cleanly.
    fn close(self: Box<Self>) -> EngineResult;
    /// The engine's own counters, as text, if it keeps any the harness knows how to
    /// read (read after each phase, untimed).
    fn counters(&self) -> Option<String> {
        None
    }
}

/// The same settings for every engine.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct EngineConfig {
    /// Bytes of cache (block cache, page cache, interval cache, as each engine has).
    pub cache_bytes: u64,
    /// Bytes of memtable / write buffer, where an engine has one.
    pub write_buffer_bytes: u64,
    /// flexkv only: writers paced by the commit (`Builder::pace_writes`). Results
    /// written before it was recorded were run unpaced, hence the default.
    #[serde(default)]
    pub flexkv_pace_writes: bool,
    /// flexkv only: the committer's sweep of scattered intervals while writes have
    /// stopped (`Builder::idle_sweep`). Results written before it existed ran without
    /// it, hence the default.
    #[serde(default)]
    pub flexkv_idle_sweep: bool,
}

/// The engines the harness knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// This project.
    Flexkv,
    /// RocksDB (the `rocksdb` crate).
    Rocksdb,
    /// LMDB (the `heed` crate).
    Lmdb,
    /// redb.
    Redb,
    /// fjall.
    Fjall,
    /// sled.
    Sled,
}

impl EngineKind {
    /// Every engine, in report order.
    pub const ALL: [EngineKind; 6] = [
        EngineKind::Flexkv,
        EngineKind::Rocksdb,
        EngineKind::Lmdb,
        EngineKind::Redb,
        EngineKind::Fjall,
        EngineKind::Sled,
    ];

    /// The engine's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Flexkv => "flexkv",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Lmdb => "lmdb",
            EngineKind::Redb => "redb",
            EngineKind::Fjall => "fjall",
            EngineKind::Sled => "sled",
        }
    }

    /// The engine named `name`.
    pub fn parse(name: &str) -> Result<EngineKind, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|k| k.name()).collect();
                format!("unknown engine {name:?} (engines: {})", names.join(", "))
            })
    }

    /// Whether this build has the engine (the others need a cargo feature).
    pub fn available(self) -> bool {
        match self {
            EngineKind::Flexkv => true,
            EngineKind::Rocksdb => cfg!(feature = "rocksdb"),
            EngineKind::Lmdb => cfg!(feature = "lmdb"),
            EngineKind::Redb => cfg!(feature = "redb"),
            EngineKind::Fjall => cfg!(feature = "fjall"),
            EngineKind::Sled => cfg!(feature = "sled"),
        }
    }

    /// The engine's settings under `config`, in words.
    pub fn configuration(self, config: &EngineConfig) -> String {
        let cache = config.cache_bytes >> 20;
        let wb = config.write_buffer_bytes >> 20;
        match self {
            EngineKind::Flexkv => format!(
                "Buffered batches (WAL, group commit, no fsync per write), Db::sync at phase end; \
                 interval cache, record cache (up to half the caches' share once the \
                 keyspace outgrows the interval cache) and in-memory indexes {cache} MiB together, \
                 memtable {wb} MiB; values of 4 KiB or more separated; GC on{}{}",
                if config.flexkv_pace_writes {
                    "; writers paced by the commit"
                } else {
                    "; writers not paced"
                },
                if config.flexkv_idle_sweep {
                    "; scattered intervals swept while writes stop"
                } else {
                    "; no idle sweep"
                }
            ),
            EngineKind::Rocksdb => format!(
                "WAL on, sync=false, flush_wal(true) at phase end; LRU block cache {cache} MiB, \
                 write buffer {wb} MiB, bloom filter 10 bits/key, compression none, \
                 max_background_jobs 2"
            ),
            EngineKind::Lmdb => {
                "MDB_NOSYNC (commits reach the OS, not the disk), env.force_sync at \
                 phase end; cache is the OS page cache (LMDB has no cache of its own); map 64 GiB"
                    .to_string()
            }
            EngineKind::Redb => format!(
                "Durability::None per transaction, an empty Durability::Immediate commit at phase \
                 end; cache {cache} MiB"
            ),
            EngineKind::Fjall => format!(
                "journal written without fsync, persist(SyncAll) at phase end; cache {cache} MiB, \
                 memtable {wb} MiB, compression none (lz4 feature off)"
            ),
            EngineKind::Sled => format!(
                "flush_every_ms off, flush() at phase end; cache {cache} MiB, compression off"
            ),
        }
    }

    /// Opens (creating) the engine in the directory `dir`, made if missing and empty.
    pub fn open(self, dir: &Path, config: &EngineConfig) -> EngineResult<Box<dyn Engine>> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        match self {
            EngineKind::Flexkv => flexkv::open(dir, config),
            #[cfg(feature = "rocksdb")]
            EngineKind::Rocksdb => rocksdb::open(dir, config),
            #[cfg(feature = "lmdb")]
            EngineKind::Lmdb => lmdb::open(dir, config),
            #[cfg(feature = "redb")]
            EngineKind::Redb => redb::open(dir, config),
            #[cfg(feature = "fjall")]
            EngineKind::Fjall => fjall::open(dir, config),
            #[cfg(feature = "sled")]
            EngineKind::Sled => sled::open(dir, config),
            #[allow(unreachable_patterns)]
            other => other
                .require()
                .map(|()| unreachable!("{} is built", other.name())),
        }
    }

    /// Fails, saying which cargo feature to build with, unless this build has the engine.
    pub fn require(self) -> EngineResult {
        if self.available() {
            return Ok(());
        }
        Err(format!(
            "{0} is not in this build: rebuild flexkv-bench with `--features {0}` (or \
             `all-engines`)",
            self.name()
        ))
    }
}

/// Copies a found value into `out`; whether it was found.
pub(crate) fn copy_out(value: Option<impl AsRef<[u8]>>, out: &mut Vec<u8>) -> bool {
    let Some(v) = value else { return false };
    out.clear();
    out.extend_from_slice(v.as_ref());
    true
}

/// Turns any engine's error into text.
pub(crate) fn text<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}
