//! LMDB (the `heed` crate): `MDB_NOSYNC`, `force_sync` at phase end. LMDB keeps no cache of
//! its own; it reads through a memory map, so its cache is the OS page cache.

use std::ops::Bound;
use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions};

use super::{text, Engine, EngineConfig, EngineResult, Op};

/// heed ties a database handle to its environment's lifetime; a benchmark child opens a
/// few environments and exits, so each one is leaked to make that lifetime `'static`.
struct Lmdb {
    env: &'static Env,
    db: Database<'static, Bytes, Bytes>,
}

const MAP_SIZE: usize = 64 << 30;

pub(super) fn open(dir: &Path, _config: &EngineConfig) -> EngineResult<Box<dyn Engine>> {
    let mut opts = EnvOpenOptions::new();
    opts.map_size(MAP_SIZE).max_dbs(1).max_readers(256);
    // SAFETY: NO_SYNC only weakens durability until `force_sync`, which the harness calls
    // at every phase end; the directory is new and opened by this process alone, which is
    // what `open` asks of its caller (no other environment on the same files).
    #[allow(unsafe_code)]
    let env = unsafe {
        opts.flags(EnvFlags::NO_SYNC);
        opts.open(dir)
    }
    .map_err(text)?;
    let env: &'static Env = Box::leak(Box::new(env));
    let tx = env.write_txn().map_err(text)?;
    let db = env
        .create_databases_and_commit(tx, |opener, tx| -> heed::Result<_> {
            let db = opener.create_database::<Bytes, Bytes>(tx, None)?;
            Ok(CommitOrAbort::<_, ()>::Commit(db))
        })
        .map_err(text)?
        .unwrap_commit();
    Ok(Box::new(Lmdb { env, db }))
}

impl Engine for Lmdb {
    fn write(&self, ops: &[Op<'_>]) -> EngineResult {
        let mut tx = self.env.write_txn().map_err(text)?;
        for op in ops {
            match op {
                Op::Put(k, v) => self.db.put(&mut tx, k, v).map_err(text)?,
                Op::Delete(k) => {
                    self.db.delete(&mut tx, k).map_err(text)?;
                }
            }
        }
        tx.commit().map_err(text)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EngineResult<bool> {
        let tx = self.env.read_txn().map_err(text)?;
        match self.db.get(&tx, key).map_err(text)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&self, start: &[u8], n: usize) -> EngineResult<usize> {
        let tx = self.env.read_txn().map_err(text)?;
        let range = (Bound::Included(start), Bound::Unbounded);
        let mut read = 0;
        for item in self.db.range(&tx, &range).map_err(text)?.take(n) {
            let (k, v) = item.map_err(text)?;
            std::hint::black_box((k.len(), v.last()));
            read += 1;
        }
        Ok(read)
    }

    fn sync(&self) -> EngineResult {
        self.env.force_sync().map_err(text)
    }

    fn close(self: Box<Self>) -> EngineResult {
        self.env.force_sync().map_err(text)
    }
}
