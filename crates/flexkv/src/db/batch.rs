//! [`WriteBatch`]: puts and deletes across keyspaces, applied atomically, and the limits
//! every write is checked against before anything is written.

use super::options::{MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::memtable::KeyspaceId;
use crate::{Durability, Error, Keyspace, Result};

/// One operation of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchOp {
    pub(crate) ks: KeyspaceId,
    pub(crate) key: Vec<u8>,
    /// `None` is a delete; `Some(empty)` is an empty value.
    pub(crate) value: Option<Vec<u8>>,
}

/// Puts and deletes, in any keyspaces of one database, applied all or nothing under one
/// sequence number. Later operations on the same key win.
///
/// ```
/// # fn main() -> flexkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = flexkv::Db::open(dir.path())?;
/// let users = db.keyspace("users")?;
/// let mut batch = flexkv::WriteBatch::new();
/// batch.put(&db.default_keyspace(), b"count", b"1")?;
/// batch.put(&users, b"alice", b"admin")?;
/// batch.delete(&users, b"bob")?;
/// db.write(batch)?;
/// assert_eq!(users.get(b"alice")?.as_deref(), Some(&b"admin"[..]));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub(crate) ops: Vec<BatchOp>,
    pub(crate) bytes: usize,
    pub(crate) durability: Durability,
    /// The database the keyspaces belong to (checked at write time).
    pub(crate) db_id: Option<u64>,
}

impl WriteBatch {
    /// An empty batch with [`Durability::Sync`].
    pub fn new() -> Self {
        WriteBatch::default()
    }

    /// Sets when the batch is acknowledged (default [`Durability::Sync`]).
    pub fn durability(&mut self, d: Durability) -> &mut Self {
        self.durability = d;
        self
    }

    /// Adds a put of `value` (which may be empty) at `key` in `ks`.
    pub fn put(&mut self, ks: &Keyspace, key: &[u8], value: &[u8]) -> Result<&mut Self> {
        check_value(value)?;
        self.push(ks, key, Some(value.to_vec()))
    }

    /// Adds a delete of `key` in `ks`.
    pub fn delete(&mut self, ks: &Keyspace, key: &[u8]) -> Result<&mut Self> {
        self.push(ks, key, None)
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn push(&mut self, ks: &Keyspace, key: &[u8], value: Option<Vec<u8>>) -> Result<&mut Self> {
        check_key(key)?;
        let db = ks.db_id();
        if self.db_id.is_some_and(|d| d != db) {
            return Err(Error::invalid(
                "a batch holds keyspaces of one database only; this keyspace belongs to another",
            ));
        }
        if self.ops.len() >= MAX_BATCH_OPS {
            return Err(Error::invalid(format!(
                "batch would exceed MAX_BATCH_OPS ({MAX_BATCH_OPS} operations)"
            )));
        }
        let bytes = self.bytes + key.len() + value.as_ref().map_or(0, Vec::len);
        if bytes > MAX_BATCH_BYTES {
            return Err(Error::invalid(format!(
                "batch would hold {bytes} bytes of keys and values, over MAX_BATCH_BYTES \
                 ({MAX_BATCH_BYTES})"
            )));
        }
        self.db_id = Some(db);
        self.bytes = bytes;
        self.ops.push(BatchOp {
            ks: ks.id(),
            key: key.to_vec(),
            value,
        });
        Ok(self)
    }
}

/// Refuses a key over [`MAX_KEY_LEN`].
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key of {} bytes exceeds MAX_KEY_LEN ({MAX_KEY_LEN} bytes)",
            key.len()
        )));
    }
    Ok(())
}

/// Refuses a value over [`MAX_VALUE_LEN`].
pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::invalid(format!(
            "value of {} bytes exceeds MAX_VALUE_LEN ({MAX_VALUE_LEN} bytes)",
            value.len()
        )));
    }
    Ok(())
}
