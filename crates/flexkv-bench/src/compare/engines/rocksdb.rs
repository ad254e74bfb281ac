//! RocksDB (the `rocksdb` crate): WAL on without sync per write, `flush_wal(true)` at phase
//! end, an LRU block cache of the shared budget, bloom filters, no compression.

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, WriteBatch, WriteOptions, DB};

use super::{copy_out, text, Engine, EngineConfig, EngineResult, Op};

struct Rocks {
    db: DB,
    write: WriteOptions,
}

pub(super) fn open(dir: &Path, config: &EngineConfig) -> EngineResult<Box<dyn Engine>> {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&Cache::new_lru_cache(config.cache_bytes as usize));
    table.set_bloom_filter(10.0, false);
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_compression_type(DBCompressionType::None);
    opts.set_write_buffer_size(config.write_buffer_bytes as usize);
    opts.set_max_background_jobs(2);
    opts.set_block_based_table_factory(&table);
    let db = DB::open(&opts, dir).map_err(text)?;
    let mut write = WriteOptions::default();
    write.set_sync(false);
    Ok(Box::new(Rocks { db, write }))
}

impl Engine for Rocks {
    fn write(&self, ops: &[Op<'_>]) -> EngineResult {
        let mut batch = WriteBatch::default();
        for op in ops {
            match op {
                Op::Put(k, v) => batch.put(k, v),
                Op::Delete(k) => batch.delete(k),
            }
        }
        self.db.write_opt(batch, &self.write).map_err(text)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EngineResult<bool> {
        Ok(copy_out(self.db.get_pinned(key).map_err(text)?, out))
    }

    fn scan(&self, start: &[u8], n: usize) -> EngineResult<usize> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut read = 0;
        while read < n && it.valid() {
            std::hint::black_box((it.key().map(<[u8]>::len), it.value().and_then(<[u8]>::last)));
            read += 1;
            it.next();
        }
        it.status().map_err(text)?;
        Ok(read)
    }

    fn sync(&self) -> EngineResult {
        self.db.flush_wal(true).map_err(text)
    }

    fn close(self: Box<Self>) -> EngineResult {
        self.db.flush_wal(true).map_err(text)
    }
}
