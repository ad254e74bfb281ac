//! flexkv through its public API: `Buffered` write batches, `Db::sync` at phase end,
//! and `Db::check` before closing (untimed), so a run that left the store damaged
//! fails instead of reporting figures.

use std::path::Path;

use flexkv::{Db, Durability, Keyspace, WriteBatch};

use super::{copy_out, text, Engine, EngineConfig, EngineResult, Op};

struct Flexkv {
    db: Db,
    ks: Keyspace,
}

pub(super) fn open(dir: &Path, config: &EngineConfig) -> EngineResult<Box<dyn Engine>> {
    let db = Db::builder(dir)
        .cache_bytes(config.cache_bytes as usize)
        .memtable_size(config.write_buffer_bytes as usize)
        .pace_writes(config.flexkv_pace_writes)
        .idle_sweep(config.flexkv_idle_sweep)
        .open()
        .map_err(text)?;
    let ks = db.default_keyspace();
    Ok(Box::new(Flexkv { db, ks }))
}

impl Engine for Flexkv {
    fn write(&self, ops: &[Op<'_>]) -> EngineResult {
        let mut batch = WriteBatch::new();
        batch.durability(Durability::Buffered);
        for op in ops {
            match op {
                Op::Put(k, v) => batch.put(&self.ks, k, v).map_err(text)?,
                Op::Delete(k) => batch.delete(&self.ks, k).map_err(text)?,
            };
        }
        self.db.write(batch).map(|_| ()).map_err(text)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EngineResult<bool> {
        Ok(copy_out(self.ks.get(key).map_err(text)?, out))
    }

    fn scan(&self, start: &[u8], n: usize) -> EngineResult<usize> {
        // Borrowed pairs, as every other engine's scan reads them.
        let mut it = self.ks.range(start..).expecting(n);
        let mut read = 0;
        while read < n {
            let Some(item) = it.next_ref() else { break };
            let (k, v) = item.map_err(text)?;
            std::hint::black_box((k.len(), v.last()));
            read += 1;
        }
        Ok(read)
    }

    fn sync(&self) -> EngineResult {
        self.db.sync().map_err(text)
    }

    fn counters(&self) -> Option<String> {
        Some(format!("{:?}", self.db.stats()))
    }

    fn close(self: Box<Self>) -> EngineResult {
        let Flexkv { db, ks } = *self;
        drop(ks);
        db.check()
            .map_err(|e| format!("flexkv's check after the run failed: {e}"))?;
        db.close().map_err(text)
    }
}
