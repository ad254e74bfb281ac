//! fjall: journal writes without fsync, `persist(SyncAll)` at phase end; built without its
//! `lz4` feature, so blocks are stored uncompressed.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{copy_out, text, Engine, EngineConfig, EngineResult, Op};

struct Fjall {
    db: Database,
    ks: Keyspace,
}

pub(super) fn open(dir: &Path, config: &EngineConfig) -> EngineResult<Box<dyn Engine>> {
    let db = Database::builder(dir)
        .cache_size(config.cache_bytes)
        .open()
        .map_err(text)?;
    let ks = db
        .keyspace("bench", || {
            KeyspaceCreateOptions::default().max_memtable_size(config.write_buffer_bytes)
        })
        .map_err(text)?;
    Ok(Box::new(Fjall { db, ks }))
}

impl Engine for Fjall {
    fn write(&self, ops: &[Op<'_>]) -> EngineResult {
        let mut batch = self.db.batch();
        for op in ops {
            match op {
                Op::Put(k, v) => batch.insert(&self.ks, *k, *v),
                Op::Delete(k) => batch.remove(&self.ks, *k),
            }
        }
        batch.commit().map_err(text)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EngineResult<bool> {
        Ok(copy_out(self.ks.get(key).map_err(text)?, out))
    }

    fn scan(&self, start: &[u8], n: usize) -> EngineResult<usize> {
        let mut read = 0;
        for guard in self.ks.range(start..).take(n) {
            let (k, v) = guard.into_inner().map_err(text)?;
            std::hint::black_box((k.len(), v.last()));
            read += 1;
        }
        Ok(read)
    }

    fn sync(&self) -> EngineResult {
        self.db.persist(PersistMode::SyncAll).map_err(text)
    }

    fn close(self: Box<Self>) -> EngineResult {
        self.db.persist(PersistMode::SyncAll).map_err(text)
    }
}
