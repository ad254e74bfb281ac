//! Exact space accounting for the value log: for every segment, how many of its bytes
//! are whole records, and who still needs which of them.
//!
//! A record's bytes are counted under exactly one holder at a time:
//! - [`Holder::Memory`]: a memtable entry points at it (or a GC relocation has written
//!   it and not yet swapped it into its keyspace);
//! - [`Holder::Store`]: a sorted keyspace's record points at it;
//! - [`Holder::Pinned`]: a history record, or a value only a history record points at,
//!   kept while some live snapshot is older than the sequence that superseded it.
//!
//! Whatever a segment holds beyond the three is garbage. The committer moves bytes
//! between holders as it applies, replaces and drops versions, so the counts are never
//! sampled. Only the store counts are persisted (in the manifest, with the sequence they
//! belong to): after a restart no snapshot is alive, so nothing is pinned, and the
//! memtable counts are rebuilt by the WAL replay.

use std::collections::BTreeMap;

/// Who holds a record's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// A memtable (or a relocation in flight).
    Memory,
    /// A sorted keyspace record.
    Store,
    /// Snapshots older than this sequence (the one that superseded the version).
    Pinned(u64),
}

/// One segment's counts, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentUsage {
    /// Whole records in the segment.
    pub total: u64,
    /// Held by sorted-keyspace records.
    pub store: u64,
    /// Held by memtables or by relocations in flight.
    pub memory: u64,
    /// Held for live snapshots.
    pub pinned: u64,
}

impl SegmentUsage {
    /// Bytes someone still needs.
    pub fn live(&self) -> u64 {
        self.store + self.memory + self.pinned
    }

    /// Bytes nobody needs.
    pub fn garbage(&self) -> u64 {
        self.total.saturating_sub(self.live())
    }
}

/// The counts of every segment, and the pins waiting for snapshots to go.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    pub(crate) segments: BTreeMap<u32, SegmentUsage>,
    /// Superseding sequence → the (segment, bytes) pinned until no snapshot is older.
    pins: BTreeMap<u64, Vec<(u32, u64)>>,
}

impl Usage {
    /// Counts `bytes` of segment `seg` as held by `holder`.
    pub(crate) fn add(&mut self, seg: u32, bytes: u64, holder: Holder) {
        let u = self.segments.entry(seg).or_default();
        match holder {
            Holder::Memory => u.memory += bytes,
            Holder::Store => u.store += bytes,
            Holder::Pinned(seq) => {
                u.pinned += bytes;
                self.pins.entry(seq).or_default().push((seg, bytes));
            }
        }
    }

    /// Stops counting `bytes` of `seg` under `holder` (a memtable or store holder; pins
    /// only go by [`Usage::release`]). Saturates: the counts are advisory for a segment
    /// a crash left uncounted, and GC verifies every record before it trusts them.
    pub(crate) fn sub(&mut self, seg: u32, bytes: u64, holder: Holder) {
        let Some(u) = self.segments.get_mut(&seg) else {
            return;
        };
        match holder {
            Holder::Memory => u.memory = u.memory.saturating_sub(bytes),
            Holder::Store => u.store = u.store.saturating_sub(bytes),
            Holder::Pinned(_) => debug_assert!(false, "pins are released, not subtracted"),
        }
    }

    /// Releases every pin no snapshot needs: all of them if there is no snapshot, else
    /// those superseded at or below the oldest one. Returns the bytes released.
    pub(crate) fn release(&mut self, oldest_snapshot: Option<u64>) -> u64 {
        let keep = match oldest_snapshot {
            None => self.pins.split_off(&u64::MAX),
            Some(s) => self.pins.split_off(&(s + 1)),
        };
        let gone = std::mem::replace(&mut self.pins, keep);
        let mut released = 0;
        for (seg, bytes) in gone.into_values().flatten() {
            if let Some(u) = self.segments.get_mut(&seg) {
                u.pinned = u.pinned.saturating_sub(bytes);
            }
            released += bytes;
        }
        released
    }

    /// Sets every segment's store count (after a rebuild, or from the manifest).
    pub(crate) fn set_store(&mut self, counts: &BTreeMap<u32, u64>) {
        for u in self.segments.values_mut() {
            u.store = 0;
        }
        for (&seg, &bytes) in counts {
            if let Some(u) = self.segments.get_mut(&seg) {
                u.store = bytes;
            }
        }
    }

    /// Every segment's store count, for the manifest.
    pub(crate) fn store_counts(&self) -> BTreeMap<u32, u64> {
        self.segments
            .iter()
            .filter(|(_, u)| u.store > 0)
            .map(|(&s, u)| (s, u.store))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_move_between_holders_and_pins_go_with_the_oldest_snapshot() {
        let mut u = Usage::default();
        u.segments.entry(1).or_default().total = 1000;
        u.add(1, 300, Holder::Memory);
        assert_eq!(u.segments[&1].garbage(), 700);
        u.sub(1, 300, Holder::Memory);
        u.add(1, 300, Holder::Store);
        u.add(1, 100, Holder::Pinned(10));
        u.add(1, 50, Holder::Pinned(20));
        assert_eq!(u.segments[&1].live(), 450);
        assert_eq!(u.release(Some(9)), 0, "a snapshot at 9 needs both");
        assert_eq!(
            u.release(Some(10)),
            100,
            "superseded at 10: a snapshot at 10 reads the new one"
        );
        assert_eq!(u.segments[&1].pinned, 50);
        assert_eq!(u.release(None), 50);
        assert_eq!(u.segments[&1].garbage(), 700);
        assert_eq!(u.store_counts(), BTreeMap::from([(1, 300)]));
    }
}
