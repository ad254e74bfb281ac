//! redb: `Durability::None` per transaction, an empty `Durability::Immediate` commit at
//! phase end (which makes every earlier commit durable).

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::{text, Engine, EngineConfig, EngineResult, Op};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

struct Redb {
    db: Database,
}

pub(super) fn open(dir: &Path, config: &EngineConfig) -> EngineResult<Box<dyn Engine>> {
    let db = Database::builder()
        .set_cache_size(config.cache_bytes as usize)
        .create(dir.join("bench.redb"))
        .map_err(text)?;
    let engine = Redb { db };
    engine.commit(&[], Durability::Immediate)?;
    Ok(Box::new(engine))
}

impl Redb {
    fn commit(&self, ops: &[Op<'_>], durability: Durability) -> EngineResult {
        let mut tx = self.db.begin_write().map_err(text)?;
        tx.set_durability(durability).map_err(text)?;
        {
            let mut table = tx.open_table(TABLE).map_err(text)?;
            for op in ops {
                match op {
                    Op::Put(k, v) => {
                        table.insert(*k, *v).map_err(text)?;
                    }
                    Op::Delete(k) => {
                        table.remove(*k).map_err(text)?;
                    }
                }
            }
        }
        tx.commit().map_err(text)
    }
}

impl Engine for Redb {
    fn write(&self, ops: &[Op<'_>]) -> EngineResult {
        self.commit(ops, Durability::None)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EngineResult<bool> {
        let tx = self.db.begin_read().map_err(text)?;
        let table = tx.open_table(TABLE).map_err(text)?;
        match table.get(key).map_err(text)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&self, start: &[u8], n: usize) -> EngineResult<usize> {
        let tx = self.db.begin_read().map_err(text)?;
        let table = tx.open_table(TABLE).map_err(text)?;
        let mut read = 0;
        for item in table.range(start..).map_err(text)?.take(n) {
            let (k, v) = item.map_err(text)?;
            std::hint::black_box((k.value().len(), v.value().last()));
            read += 1;
        }
        Ok(read)
    }

    fn sync(&self) -> EngineResult {
        self.commit(&[], Durability::Immediate)
    }

    fn close(self: Box<Self>) -> EngineResult {
        self.commit(&[], Durability::Immediate)
    }
}
