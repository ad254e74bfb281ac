//! Baseline extent indexes for the paper's Table 1 (FlexTree §6.1): the same operations as
//! FlexTree on structures without shift values, so every shift is paid entry by entry.

mod array;
mod btree;

pub use array::SortedArray;
pub use btree::BPlusTree;

/// The operations Table 1 measures, over any extent index.
pub trait ExtentIndex {
    /// The address space size in bytes.
    fn size(&self) -> u64;
    /// Inserts `len` bytes at `addr` at the extent boundary `off`, shifting later extents.
    fn insert(&mut self, off: u64, len: u64, addr: u64);
    /// The physical address of byte `off`.
    fn lookup(&self, off: u64) -> u64;
    /// Visits `n` extents from the one holding `off`; returns a checksum of what it saw.
    fn range(&self, off: u64, n: usize) -> u64;
}

impl ExtentIndex for flexkv::flextree::FlexTree {
    fn size(&self) -> u64 {
        self.len()
    }

    fn insert(&mut self, off: u64, len: u64, addr: u64) {
        flexkv::flextree::FlexTree::insert(self, off, len, addr)
            .expect("benchmark insert in range");
    }

    fn lookup(&self, off: u64) -> u64 {
        let e = flexkv::flextree::FlexTree::lookup(self, off).expect("lookup in range");
        e.addr.unwrap_or(0) + (off - e.offset)
    }

    fn range(&self, off: u64, n: usize) -> u64 {
        self.extents_from(off).take(n).fold(0, |acc, e| {
            acc.wrapping_add(e.addr.unwrap_or(0) ^ e.offset)
                .wrapping_add(e.len)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexkv::flextree::{FlexTree, FlexTreeOptions};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// The baselines must answer exactly as FlexTree (itself checked against a model in
    /// the engine's tests), or the benchmark's ratios compare wrong answers.
    #[test]
    fn baselines_answer_as_flextree_does() {
        let opts = FlexTreeOptions {
            leaf_capacity: 6,
            internal_capacity: 6,
        };
        let mut flex = FlexTree::with_options(opts).unwrap();
        let mut btree = BPlusTree::new(6, 6);
        let mut array = SortedArray::default();
        let mut rng = SmallRng::seed_from_u64(7);
        for i in 0..3_000u64 {
            // Inserts at extent boundaries, as the benchmark does: every extent is 16 bytes.
            let off = rng.random_range(0..=i) * 16;
            let indexes: [&mut dyn ExtentIndex; 3] = [&mut flex, &mut btree, &mut array];
            for idx in indexes {
                idx.insert(off, 16, i * 16);
            }
            let probe = rng.random_range(0..flex.len());
            let want = (
                ExtentIndex::lookup(&flex, probe),
                ExtentIndex::range(&flex, probe, 7),
            );
            assert_eq!(
                (btree.lookup(probe), btree.range(probe, 7)),
                want,
                "B+-tree at {i}"
            );
            assert_eq!(
                (array.lookup(probe), array.range(probe, 7)),
                want,
                "array at {i}"
            );
        }
        assert_eq!(btree.size(), flex.len());
        assert_eq!(array.size(), flex.len());
    }
}
