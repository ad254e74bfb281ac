//! Model test: random puts, deletes, batches, reads, ranges, snapshots, syncs, reopens
//! and crashes against a `BTreeMap` per keyspace. At least 10,000 operations per run
//! (cases × operations per case). Half the cases (odd seeds) give the database a cache
//! budget its keyspaces outgrow, so point reads also go through the record cache.
#![allow(clippy::unwrap_used)]

mod common;
use common::small_space;

use std::collections::BTreeMap;
use std::ops::Bound;

use flexkv::io::{CrashMode, FaultVfs};
use flexkv::{Db, Durability, Keyspace, Snapshot, WriteBatch};
use proptest::prelude::*;

const DIR: &str = "/db";
const KEYSPACES: usize = 3;
const CASES: u32 = 64;
const OPS: usize = 170;

type Model = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;

#[derive(Clone, Debug)]
enum Op {
    Put(usize, Vec<u8>, Vec<u8>, bool),
    Delete(usize, Vec<u8>, bool),
    Batch(Vec<(usize, Vec<u8>, Option<Vec<u8>>)>, bool),
    Get(usize, Vec<u8>),
    /// Point reads of every key the keyspace holds, twice.
    GetAll(usize),
    Range(usize, Option<Vec<u8>>, Option<Vec<u8>>, bool),
    TakeSnapshot,
    CheckSnapshot(usize, usize),
    DropSnapshot(usize),
    Sync,
    Flush,
    Reopen,
    Crash,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u8..24).prop_map(|k| vec![b'k', k]),
        proptest::collection::vec(any::<u8>(), 0..4),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..20),
        1 => (20usize..300).prop_map(|n| vec![n as u8; n]), // separated (threshold 32)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let ks = 0..KEYSPACES;
    prop_oneof![
        20 => (ks.clone(), key(), value(), any::<bool>()).prop_map(|(s, k, v, d)| Op::Put(s, k, v, d)),
        8 => (ks.clone(), key(), any::<bool>()).prop_map(|(s, k, d)| Op::Delete(s, k, d)),
        6 => (proptest::collection::vec((ks.clone(), key(), proptest::option::of(value())), 1..8), any::<bool>())
            .prop_map(|(ops, d)| Op::Batch(ops, d)),
        10 => (ks.clone(), key()).prop_map(|(s, k)| Op::Get(s, k)),
        3 => ks.clone().prop_map(Op::GetAll),
        6 => (ks.clone(), proptest::option::of(key()), proptest::option::of(key()), any::<bool>())
            .prop_map(|(s, lo, hi, rev)| Op::Range(s, lo, hi, rev)),
        2 => Just(Op::TakeSnapshot),
        3 => (ks.clone(), any::<usize>()).prop_map(|(s, i)| Op::CheckSnapshot(s, i)),
        1 => any::<usize>().prop_map(Op::DropSnapshot),
        2 => Just(Op::Sync),
        2 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

struct World {
    vfs: FaultVfs,
    /// The cache budget: the default, or (odd seeds) one the keyspaces outgrow, so
    /// that point reads go through the record cache and intervals are evicted.
    cache: usize,
    db: Db,
    ks: Vec<Keyspace>,
    model: Model,
    /// The model as of the last moment everything written was durable.
    durable: Model,
    /// The model after each `Buffered` write since then: a crash may keep any prefix of
    /// them (a memtable freeze syncs the WAL, so the committer can make a `Buffered`
    /// write durable before anyone asks).
    since_durable: Vec<Model>,
    snapshots: Vec<(Snapshot, Model)>,
}

fn durability(sync: bool) -> Durability {
    if sync {
        Durability::Sync
    } else {
        Durability::Buffered
    }
}

impl World {
    fn new(seed: u64) -> World {
        let vfs = FaultVfs::new(seed);
        let cache = if seed % 2 == 1 { 4 << 10 } else { 256 << 20 };
        let (db, ks) = World::open(&vfs, cache);
        World {
            vfs,
            cache,
            db,
            ks,
            model: vec![BTreeMap::new(); KEYSPACES],
            durable: vec![BTreeMap::new(); KEYSPACES],
            since_durable: Vec::new(),
            snapshots: Vec::new(),
        }
    }

    fn open(vfs: &FaultVfs, cache: usize) -> (Db, Vec<Keyspace>) {
        // Memtables this small fill every few operations, so every case commits to
        // the sorted keyspaces many times, and small FlexSpace segments make their
        // garbage collection run too. Intervals of at most 2 pairs and index nodes of
        // 4 entries make the few hundred keys of a case an index of several levels,
        // which splits and merges keep changing.
        let db = Db::builder(DIR)
            .vfs(vfs.shared())
            .value_threshold(32)
            .memtable_size(4 << 10)
            .interval_pairs(2)
            .index_fanout(4)
            .space_options(small_space())
            .cache_bytes(cache)
            .open()
            .unwrap();
        let mut ks = vec![db.default_keyspace()];
        ks.extend((1..KEYSPACES).map(|i| db.keyspace(&format!("ks{i}")).unwrap()));
        (db, ks)
    }

    fn wrote(&mut self, sync: bool) {
        if sync {
            self.made_durable();
        } else {
            self.since_durable.push(self.model.clone());
        }
    }

    fn check_range(
        &self,
        s: usize,
        lo: &Option<Vec<u8>>,
        hi: &Option<Vec<u8>>,
        rev: bool,
        snap: Option<(&Snapshot, &Model)>,
    ) {
        let lo_b = lo.clone().map_or(Bound::Unbounded, Bound::Included);
        let hi_b = hi.clone().map_or(Bound::Unbounded, Bound::Excluded);
        if let (Some(l), Some(h)) = (lo, hi) {
            if l > h {
                return; // BTreeMap::range panics on inverted bounds
            }
        }
        let model = snap.map_or(&self.model, |(_, m)| m);
        let mut want: Vec<_> = model[s]
            .range((lo_b.clone(), hi_b.clone()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut it = match snap {
            Some((sn, _)) => sn.keyspace(&self.ks[s]).unwrap().range((lo_b, hi_b)),
            None => self.ks[s].range((lo_b, hi_b)),
        };
        if rev {
            want.reverse();
        }
        // Copied and borrowed steps in turn.
        let mut got = Vec::new();
        loop {
            let pair = match (rev, got.len() % 2 == 1) {
                (false, false) => it.next(),
                (true, false) => it.next_back(),
                (false, true) => it
                    .next_ref()
                    .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec()))),
                (true, true) => it
                    .next_back_ref()
                    .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec()))),
            };
            match pair {
                Some(p) => got.push(p.unwrap()),
                None => break,
            }
        }
        assert_eq!(got, want, "range {lo:?}..{hi:?} rev={rev} in keyspace {s}");
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Put(s, k, v, sync) => {
                self.ks[s].put_with(&k, &v, durability(sync)).unwrap();
                self.model[s].insert(k, v);
                self.wrote(sync);
            }
            Op::Delete(s, k, sync) => {
                self.ks[s].delete_with(&k, durability(sync)).unwrap();
                self.model[s].remove(&k);
                self.wrote(sync);
            }
            Op::Batch(ops, sync) => {
                let mut b = WriteBatch::new();
                b.durability(durability(sync));
                for (s, k, v) in ops {
                    match v {
                        Some(v) => {
                            b.put(&self.ks[s], &k, &v).unwrap();
                            self.model[s].insert(k, v);
                        }
                        None => {
                            b.delete(&self.ks[s], &k).unwrap();
                            self.model[s].remove(&k);
                        }
                    }
                }
                self.db.write(b).unwrap();
                self.wrote(sync);
            }
            Op::Get(s, k) => {
                assert_eq!(self.ks[s].get(&k).unwrap(), self.model[s].get(&k).cloned());
                assert_eq!(
                    self.ks[s].contains(&k).unwrap(),
                    self.model[s].contains_key(&k)
                );
            }
            Op::GetAll(s) => self.get_all(s),
            Op::Range(s, lo, hi, rev) => self.check_range(s, &lo, &hi, rev, None),
            Op::TakeSnapshot => self
                .snapshots
                .push((self.db.snapshot(), self.model.clone())),
            Op::CheckSnapshot(s, i) => {
                if !self.snapshots.is_empty() {
                    let (snap, m) = &self.snapshots[i % self.snapshots.len()];
                    self.check_range(s, &None, &None, i % 2 == 0, Some((snap, m)));
                    for (k, v) in m[s].iter().take(3) {
                        let view = snap.keyspace(&self.ks[s]).unwrap();
                        assert_eq!(view.get(k).unwrap().as_ref(), Some(v));
                    }
                }
            }
            Op::DropSnapshot(i) => {
                if !self.snapshots.is_empty() {
                    let n = self.snapshots.len();
                    self.snapshots.remove(i % n);
                }
            }
            Op::Sync => {
                self.db.sync().unwrap();
                self.made_durable();
            }
            Op::Flush => {
                // A commit makes what it commits durable, Buffered writes included.
                self.db.flush().unwrap();
                self.made_durable();
            }
            Op::Reopen => {
                self.snapshots.clear();
                self.ks.clear();
                let db =
                    std::mem::replace(&mut self.db, World::open(&FaultVfs::new(0), self.cache).0);
                db.close().unwrap();
                (self.db, self.ks) = World::open(&self.vfs, self.cache);
                self.made_durable();
                self.check_all();
            }
            Op::Crash => {
                self.snapshots.clear();
                self.ks.clear();
                let db =
                    std::mem::replace(&mut self.db, World::open(&FaultVfs::new(0), self.cache).0);
                self.vfs.crash(CrashMode::DropUnsynced);
                // Every call the crashed engine makes from now on fails (its handle is of
                // the file system before the crash), so its destructor changes nothing the
                // next open recovers, and it frees the engine's memory and threads:
                // with forgotten engines 1,500 cases peaked at 9.9 GB, and 30,000 ran
                // out of memory.
                drop(db);
                (self.db, self.ks) = World::open(&self.vfs, self.cache);
                // The durable state, or it plus a prefix of the Buffered writes after it.
                let found = self.contents();
                let candidates = std::iter::once(&self.durable).chain(&self.since_durable);
                let kept = candidates
                    .into_iter()
                    .find(|m| **m == found)
                    .unwrap_or_else(|| {
                        panic!(
                            "after a crash the database holds no prefix of the writes: {found:?}"
                        )
                    })
                    .clone();
                self.model = kept;
                self.made_durable();
                self.check_all();
            }
        }
    }

    /// Everything is durable as of now.
    fn made_durable(&mut self) {
        self.durable = self.model.clone();
        self.since_durable.clear();
    }

    /// What the database holds, keyspace by keyspace.
    fn contents(&self) -> Model {
        self.ks
            .iter()
            .map(|k| k.iter().map(|r| r.unwrap()).collect())
            .collect()
    }

    fn check_all(&self) {
        for s in 0..KEYSPACES {
            self.check_range(s, &None, &None, false, None);
            self.get_all(s);
        }
        self.db.check().unwrap();
    }

    /// Point reads of every key of keyspace `s`, twice: where the keyspace outgrew the
    /// budget, the second pass reads what the first put in the record cache, and later
    /// operations read what is left of it.
    fn get_all(&self, s: usize) {
        for _ in 0..2 {
            for (k, v) in &self.model[s] {
                assert_eq!(self.ks[s].get(k).unwrap().as_ref(), Some(v));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn db_matches_a_btreemap_model(seed in any::<u64>(), ops in proptest::collection::vec(op(), OPS)) {
        let mut w = World::new(seed);
        for op in ops {
            w.apply(op);
        }
        w.check_all();

    }
}

// The issue asks for at least 10,000 operations per run.
const _: () = assert!(CASES as usize * OPS >= 10_000);
