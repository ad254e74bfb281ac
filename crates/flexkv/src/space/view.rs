//! Read-only views of a space: reads of the space as it was, while it changes.
//!
//! A [`SpaceView`] is a copy of the FlexTree at one moment, with what it needs to read
//! the bytes that tree maps: the data file (and its mapping), and the open segment's
//! bytes the file did not have yet, copied. It borrows nothing from the space, so a
//! reader holding it reads while the owner of the space changes it (under a write lock
//! that the reader would otherwise wait for).
//!
//! What keeps the bytes there: a space writes each segment once, from its start, and
//! writes it again only after it is freed, made free, and opened anew. While a view is
//! alive, the space holds every segment that becomes free instead
//! ([`super::segments::State::Held`]): no reuse, no punched hole. Segments that were
//! already free, or freeing, when the view was made hold nothing its tree maps. So
//! every byte a view's tree maps stays as it was written for as long as the view lives.
//! The cost: while views live, freed segments are not reused and the data file grows by
//! what garbage collection frees meanwhile. A space with a size limit
//! ([`SpaceOptions::max_data_size`](super::SpaceOptions::max_data_size)) makes no views,
//! since a held segment could make a write fail.

use std::sync::Arc;

use super::{fill_runs, read_or_corrupt, FlexSpace, Shortcut};
use crate::flextree::FlexTree;
use crate::io::{VfsFile, Window};
use crate::Result;

/// A read-only copy of a [`FlexSpace`] at one moment ([`FlexSpace::view`]); the
/// comments of `space/view.rs` say how its bytes are kept while it lives.
pub struct SpaceView {
    tree: FlexTree,
    data: Arc<dyn VfsFile>,
    window: Option<Arc<Window>>,
    /// The data file's length when the view was made: the window is read below it only.
    file_len: u64,
    /// The open segment's bytes the file did not have yet, and where they start.
    tail: Option<(u64, Vec<u8>)>,
    segment_size: u64,
    /// Counted by the space while the view lives.
    _pin: Arc<()>,
}

impl std::fmt::Debug for SpaceView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpaceView")
            .field("len", &self.tree.len())
            .field("file_len", &self.file_len)
            .finish()
    }
}

impl FlexSpace {
    /// A view of the space as it is now, for reads while it changes (see
    /// [`SpaceView`]); `None` for a space with a size limit. Copies the tree (O(extents))
    /// and the open segment's unwritten bytes (up to a segment).
    pub fn view(&self) -> Option<SpaceView> {
        if self.opts.max_data_size.is_some() {
            return None;
        }
        Some(SpaceView {
            tree: self.tree.read_copy(),
            data: Arc::clone(&self.data),
            window: self.window.clone(),
            file_len: self.segs.file_len(),
            tail: self.segs.unflushed_bytes(),
            segment_size: self.opts.segment_size,
            _pin: Arc::clone(&self.view_pins),
        })
    }

    /// Whether a [`SpaceView`] of this space is alive.
    pub(super) fn views_alive(&self) -> bool {
        Arc::strong_count(&self.view_pins) > 1
    }

    /// Segments freed while views were alive, which wait for them to go.
    pub fn held_segments(&self) -> usize {
        self.segs.held_count()
    }
}

impl SpaceView {
    /// The size of the space as the view sees it.
    pub fn len(&self) -> u64 {
        self.tree.len()
    }

    /// Whether the space was empty.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Reads `buf.len()` bytes at `off` as the space held them when the view was made,
    /// as [`FlexSpace::read_self_checked_while`] does: no block checksums (the caller's
    /// bytes carry their own), one physically contiguous run at a time in logical
    /// order, asking `more` after each whether to go on. `shortcut`, if any, is one the
    /// range had when the view was made: a spot is read with no walk of the tree (its
    /// bytes stay while the view lives), and a hint that holds in the view's tree (its
    /// stamps are the space's when the view was made) starts the walk with no
    /// descent. Returns how many extents map the range (1 for a spot) and how many
    /// bytes were filled.
    pub fn read_while(
        &self,
        off: u64,
        buf: &mut [u8],
        shortcut: Option<Shortcut>,
        mut more: impl FnMut(&[u8]) -> bool,
    ) -> Result<(usize, usize)> {
        let len = buf.len() as u64;
        self.tree.check_range("query", off, len)?;
        let hint = match shortcut {
            Some(Shortcut::Spot(spot)) => {
                self.read_data(spot.addr, buf)?;
                more(buf);
                return Ok((1, buf.len()));
            }
            Some(Shortcut::Hint(h)) => Some(h),
            None => None,
        };
        let mut runs = Vec::new();
        crate::flextree::runs_of(self.tree.extents_hinted(off, hint).0, off, len, &mut runs);
        if let Some(w) = &self.window {
            for r in &runs {
                if let Some(a) = r.addr {
                    w.prefetch(a, r.len.min(128) as usize);
                }
            }
        }
        let read = |a: u64, b: &mut [u8]| self.read_data(a, b);
        // Spans save system calls, which a window does not make (see `Spans`).
        let spanned = self.window.is_none();
        let filled = fill_runs(&runs, self.segment_size, spanned, buf, read, read, more)?;
        Ok((runs.len(), filled))
    }

    /// Reads the data bytes at `addr`: those that were only in the open segment's
    /// buffer from the copy of them, the rest from the file.
    fn read_data(&self, mut addr: u64, mut out: &mut [u8]) -> Result<()> {
        while !out.is_empty() {
            let n = match &self.tail {
                Some((start, bytes)) if addr >= *start && addr - start < bytes.len() as u64 => {
                    let at = (addr - start) as usize;
                    let n = out.len().min(bytes.len() - at);
                    out[..n].copy_from_slice(&bytes[at..at + n]);
                    n
                }
                // Bytes before the unwritten ones, then those.
                Some((start, _)) if addr < *start => {
                    let n = out.len().min((start - addr) as usize);
                    self.read_file(addr, &mut out[..n])?;
                    n
                }
                _ => {
                    self.read_file(addr, out)?;
                    out.len()
                }
            };
            addr += n as u64;
            out = &mut std::mem::take(&mut out)[n..];
        }
        Ok(())
    }

    /// Reads data-file bytes at `addr`: a copy from the window if it spans them and
    /// the file had them when the view was made (a page past the file's end must not
    /// be touched), else a `pread`.
    fn read_file(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        if let Some(w) = &self.window {
            if addr + out.len() as u64 <= self.file_len && w.copy_to(addr, out) {
                return Ok(());
            }
        }
        read_or_corrupt(&*self.data, out, addr)
    }
}
