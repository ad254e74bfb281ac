//! Checksums of the data file: one CRC32C per 4 KiB block, over the block's filled
//! prefix.
//!
//! Data is appended to a segment and never changed in place, so a block only grows until
//! its segment closes. New checksums are logged (as log entries placed before the changes
//! that refer to the data, so any surviving prefix of the log has the checksums its
//! changes need) and saved with each checkpoint as pages of [`CHUNK`] entries, of which
//! only changed ones are rewritten. Every read from the data file verifies the blocks it
//! touches: a flipped byte is [`crate::Error::Corruption`], never wrong data.

use std::collections::BTreeSet;

/// Bytes per checksummed block.
pub(crate) const BLOCK: u64 = 4096;
/// Block entries per checkpoint page (8 bytes each after a 24-byte page head).
pub(crate) const CHUNK: usize = 509;

/// One block's checksum: how many bytes of it are written, and their CRC32C.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BlockSum {
    pub fill: u32,
    pub crc: u32,
}

/// The checksums of every block of the data file.
#[derive(Debug, Default)]
pub(crate) struct CrcTable {
    sums: Vec<BlockSum>,
    dirty: BTreeSet<usize>,
}

impl CrcTable {
    pub(crate) fn set(&mut self, block: u64, sum: BlockSum) {
        let b = block as usize;
        if self.sums.len() <= b {
            self.sums.resize(b + 1, BlockSum::default());
        }
        self.sums[b] = sum;
        self.dirty.insert(b / CHUNK);
    }

    /// Asks for block `block`'s entry ahead of a `get`.
    pub(crate) fn prefetch(&self, block: u64) {
        if let Some(e) = self.sums.get(block as usize) {
            crate::prefetch::prefetch(std::slice::from_ref(e));
        }
    }

    pub(crate) fn get(&self, block: u64) -> BlockSum {
        self.sums.get(block as usize).copied().unwrap_or_default()
    }

    /// How many chunks the table spans.
    pub(crate) fn chunks(&self) -> usize {
        self.sums.len().div_ceil(CHUNK)
    }

    pub(crate) fn chunk(&self, c: usize) -> &[BlockSum] {
        &self.sums[c * CHUNK..((c + 1) * CHUNK).min(self.sums.len())]
    }

    /// Loads chunk `c` from a checkpoint (not dirty: it is on disk).
    pub(crate) fn load_chunk(&mut self, c: usize, sums: &[BlockSum]) {
        let start = c * CHUNK;
        if self.sums.len() < start + sums.len() {
            self.sums.resize(start + sums.len(), BlockSum::default());
        }
        self.sums[start..start + sums.len()].copy_from_slice(sums);
    }

    pub(crate) fn is_dirty(&self, c: usize) -> bool {
        self.dirty.contains(&c)
    }

    pub(crate) fn clear_dirty(&mut self) {
        self.dirty.clear();
    }
}

/// The checksum of a block's filled prefix.
pub(crate) fn sum(bytes: &[u8]) -> BlockSum {
    BlockSum {
        fill: bytes.len() as u32,
        crc: crate::checksum::crc32c(bytes),
    }
}
