//! A sorted array of extents (FlexTree §6.1): binary search to find, and an insert moves
//! and re-offsets every later extent.

use super::ExtentIndex;

/// The baseline sorted array: `(offset, length, address)` per extent.
#[derive(Default)]
pub struct SortedArray {
    extents: Vec<(u64, u64, u64)>,
    size: u64,
}

impl SortedArray {
    fn holding(&self, off: u64) -> usize {
        self.extents.partition_point(|e| e.0 <= off) - 1
    }
}

impl ExtentIndex for SortedArray {
    fn size(&self) -> u64 {
        self.size
    }

    fn insert(&mut self, off: u64, len: u64, addr: u64) {
        let pos = self.extents.partition_point(|e| e.0 < off);
        self.extents.insert(pos, (off, len, addr));
        self.extents[pos + 1..].iter_mut().for_each(|e| e.0 += len);
        self.size += len;
    }

    fn lookup(&self, off: u64) -> u64 {
        let e = self.extents[self.holding(off)];
        e.2 + (off - e.0)
    }

    fn range(&self, off: u64, n: usize) -> u64 {
        let i = self.holding(off);
        self.extents[i..(i + n).min(self.extents.len())]
            .iter()
            .fold(0, |acc, e| acc.wrapping_add(e.2 ^ e.0).wrapping_add(e.1))
    }
}
