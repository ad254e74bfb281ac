//! Helpers shared by the integration tests. (Each test crate uses some of them.)
#![allow(dead_code)]

use flexkv::io::FaultVfs;
use flexkv::space::SpaceOptions;
use flexkv::Db;

/// FlexSpace options small enough that a test fills segments, collects them and
/// checkpoints its tree.
pub fn small_space() -> SpaceOptions {
    SpaceOptions {
        segment_size: 64 << 10,
        max_extent: 16 << 10,
        log_capacity: 8 << 10,
        log_grows_with_tree: false,
        ..SpaceOptions::default()
    }
}

/// A database at `/db` that commits a memtable only when it fills, or on `flush` or
/// `close` (no idle commits), so that a test places pairs in the memtable or the store
/// on purpose.
pub fn open_quiet(vfs: &FaultVfs) -> Db {
    Db::builder("/db")
        .vfs(vfs.shared())
        .idle_commit(std::time::Duration::ZERO)
        .open()
        .unwrap()
}

/// A database at `/db` whose intervals churn: values up to 4 KiB stay inline, so
/// records of hundreds of bytes make intervals split by size as well as by count, and
/// 32 KiB memtables commit every few hundred writes.
pub fn open_churning(vfs: &FaultVfs) -> Db {
    Db::builder("/db")
        .vfs(vfs.shared())
        .value_threshold(4096)
        .memtable_size(32 << 10)
        .open()
        .unwrap()
}

/// A value that names its key: `key`, then dots, 20 to 719 of them as `n` varies, so
/// a record moves when it is rewritten and a read that lands on another key's record
/// is caught ([`names`]).
pub fn named_value(key: &[u8], n: u32) -> Vec<u8> {
    let mut v = key.to_vec();
    v.resize(key.len() + 20 + (n as usize * 37) % 700, b'.');
    v
}

/// A value that says which round `n` wrote it: `n`, then `key`'s [`named_value`] for
/// `salt` ([`round_of`] reads the round back, [`names`] the rest).
pub fn round_value(key: &[u8], n: u32, salt: u32) -> Vec<u8> {
    let mut v = n.to_be_bytes().to_vec();
    v.extend(named_value(key, salt));
    v
}

/// The round a [`round_value`] was written in.
pub fn round_of(value: &[u8]) -> u32 {
    u32::from_be_bytes(value[..4].try_into().expect("a round value"))
}

/// Whether `value` is one of `key`'s [`named_value`]s.
pub fn names(key: &[u8], value: &[u8]) -> bool {
    value.starts_with(key) && value[key.len()..].iter().all(|&b| b == b'.')
}
