//! sled 0.34: periodic flushing off, `flush()` at phase end, compression off (its default).

use std::path::Path;

use super::{copy_out, text, Engine, EngineConfig, EngineResult, Op};

struct Sled {
    db: sled::Db,
}

pub(super) fn open(dir: &Path, config: &EngineConfig) -> EngineResult<Box<dyn Engine>> {
    let db = sled::Config::new()
        .path(dir)
        .cache_capacity(config.cache_bytes)
        .flush_every_ms(None)
        .open()
        .map_err(text)?;
    Ok(Box::new(Sled { db }))
}

impl Engine for Sled {
    fn write(&self, ops: &[Op<'_>]) -> EngineResult {
        let mut batch = sled::Batch::default();
        for op in ops {
            match op {
                Op::Put(k, v) => batch.insert(*k, *v),
                Op::Delete(k) => batch.remove(*k),
            }
        }
        self.db.apply_batch(batch).map_err(text)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EngineResult<bool> {
        Ok(copy_out(self.db.get(key).map_err(text)?, out))
    }

    fn scan(&self, start: &[u8], n: usize) -> EngineResult<usize> {
        let mut read = 0;
        for item in self.db.range(start..).take(n) {
            let (k, v) = item.map_err(text)?;
            std::hint::black_box((k.len(), v.last()));
            read += 1;
        }
        Ok(read)
    }

    fn sync(&self) -> EngineResult {
        self.db.flush().map(|_| ()).map_err(text)
    }

    fn close(self: Box<Self>) -> EngineResult {
        self.db.flush().map(|_| ()).map_err(text)
    }
}
