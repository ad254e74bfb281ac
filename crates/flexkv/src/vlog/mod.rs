//! The value log (WiscKey §3.2–3.4): large values written once, outside the keyspaces.
//!
//! Values at or above the separation threshold are appended, one record per value
//! (key, sequence, value; see [`record`]), to numbered segment files
//! `vlog-NNNNNNNN.seg`. The WAL and the memtable hold a [`Pointer`] instead of the value.
//! The group-commit leader appends a whole group's records with one write (the buffering
//! of WiscKey §3.4.1, without a second user-space buffer that reads would have to
//! search) and syncs the value log before the WAL, so an acknowledged WAL entry never
//! points at a value that is not durable.
//!
//! Invariants:
//! - Only the active (highest-numbered) segment is appended to; a segment is synced
//!   before the next one is created, so only the active segment can have a torn tail.
//! - On open, the active segment is cut back to its last whole record ([`ValueLog::open`]);
//!   the WAL replay then drops entries that point past a segment's valid end.
//! - Every read checks the header CRC, the payload CRC, the pointer's check value and the
//!   key, and returns [`Error::Corruption`] on any mismatch.
//!
//! Per-segment live bytes are counted here (added on write and on replay); GC, which
//! subtracts them, is a later component.

mod record;

pub use record::Pointer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::io::{Numbered, OpenMode, Vfs, VfsFile};
use crate::memtable::KeyspaceId;
use crate::{Error, Result};
use record::{Header, HEADER_LEN};

/// The segment files.
const SEGMENTS: Numbered = Numbered {
    prefix: "vlog-",
    suffix: ".seg",
};

/// The file name of segment `id`.
pub(crate) fn segment_name(id: u32) -> String {
    SEGMENTS.name(id)
}

fn parse_segment_name(name: &str) -> Option<u32> {
    SEGMENTS.parse(name)
}

/// One value to separate: which keyspace and key it belongs to, its sequence, its bytes.
pub(crate) struct NewValue<'a> {
    pub(crate) ks: KeyspaceId,
    pub(crate) key: &'a [u8],
    pub(crate) seq: u64,
    pub(crate) value: &'a [u8],
}

#[derive(Debug)]
struct Active {
    id: u32,
    file: Arc<dyn VfsFile>,
    len: u64,
    synced: bool,
}

/// The value log of one database directory.
#[derive(Debug)]
pub(crate) struct ValueLog {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    segment_size: u64,
    active: Mutex<Active>,
    /// Every segment's handle, for reads.
    segments: RwLock<BTreeMap<u32, Arc<dyn VfsFile>>>,
    /// Bytes of records that some entry still points to, per segment.
    live: Mutex<BTreeMap<u32, u64>>,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
}

impl ValueLog {
    /// Opens the value log in `dir`, creating its first segment if there is none. Appends
    /// go after the active segment's last whole record; [`ValueLog::cut_tail`] removes
    /// what lies beyond it once the WAL replay has decided nothing there is needed.
    pub(crate) fn open(vfs: Arc<dyn Vfs>, dir: &Path, segment_size: u64) -> Result<ValueLog> {
        let mut segments = BTreeMap::new();
        for name in vfs.list(dir)? {
            if let Some(id) = parse_segment_name(&name) {
                segments.insert(id, vfs.open(&dir.join(&name), OpenMode::Existing)?);
            }
        }
        let active = match segments.last_key_value() {
            Some((&id, file)) => {
                let len = valid_prefix(file.as_ref())?;
                Active {
                    id,
                    file: Arc::clone(file),
                    len,
                    synced: true,
                }
            }
            None => {
                let file = create_segment(vfs.as_ref(), dir, 1)?;
                segments.insert(1, Arc::clone(&file));
                Active {
                    id: 1,
                    file,
                    len: 0,
                    synced: true,
                }
            }
        };
        Ok(ValueLog {
            vfs,
            dir: dir.to_path_buf(),
            segment_size,
            active: Mutex::new(active),
            segments: RwLock::new(segments),
            live: Mutex::new(BTreeMap::new()),
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        })
    }

    /// Cuts the active segment back to its last whole record, durably: a torn tail left
    /// by a crash must not be read as a record after new appends land beside it.
    pub(crate) fn cut_tail(&self) -> Result<()> {
        let a = self.active.lock();
        if a.file.len()? != a.len {
            a.file.set_len(a.len)?;
            a.file.sync()?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Appends one record per value with a single write and returns their pointers, in
    /// order. Not durable until [`ValueLog::sync`].
    pub(crate) fn append(&self, values: &[NewValue<'_>]) -> Result<Vec<Pointer>> {
        let mut buf = Vec::new();
        let mut spans = Vec::with_capacity(values.len());
        for v in values {
            let at = buf.len() as u64;
            let check = record::encode(&mut buf, v.ks, v.key, v.seq, v.value);
            spans.push((at, v.value.len(), check));
        }
        let mut a = self.active.lock();
        if a.len > 0 && a.len + buf.len() as u64 > self.segment_size {
            self.roll(&mut a)?;
        }
        a.file.write_at(&buf, a.len)?;
        let base = a.len;
        a.len += buf.len() as u64;
        a.synced = false;
        let id = a.id;
        drop(a);
        self.bytes_written
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        *self.live.lock().entry(id).or_insert(0) += buf.len() as u64;
        Ok(spans
            .into_iter()
            .map(|(at, len, check)| Pointer {
                segment: id,
                offset: base + at,
                len: u32::try_from(len).unwrap_or(u32::MAX),
                check,
            })
            .collect())
    }

    /// Syncs the old active segment and starts the next one (made durable in the
    /// directory before anything points into it).
    fn roll(&self, a: &mut Active) -> Result<()> {
        if !a.synced {
            a.file.sync()?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        let id = a.id + 1;
        let file = create_segment(self.vfs.as_ref(), &self.dir, id)?;
        self.segments.write().insert(id, Arc::clone(&file));
        *a = Active {
            id,
            file,
            len: 0,
            synced: true,
        };
        Ok(())
    }

    /// Makes every appended record durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let mut a = self.active.lock();
        if !a.synced {
            a.file.sync()?;
            a.synced = true;
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether every byte of the record `ptr` (with a key of `key_len` bytes) lies inside
    /// the valid part of its segment: false for pointers a crash left dangling.
    pub(crate) fn holds(&self, ptr: &Pointer, key_len: usize) -> Result<bool> {
        let file = match self.segments.read().get(&ptr.segment) {
            Some(f) => Arc::clone(f),
            None => return Ok(false),
        };
        let a = self.active.lock();
        let len = if a.id == ptr.segment {
            a.len
        } else {
            file.len()?
        };
        Ok(ptr.offset.saturating_add(ptr.record_len(key_len)) <= len)
    }

    /// Counts the record `ptr` as live again (WAL replay re-creates the references).
    pub(crate) fn count_live(&self, ptr: &Pointer, key_len: usize) {
        *self.live.lock().entry(ptr.segment).or_insert(0) += ptr.record_len(key_len);
    }

    /// The path of segment `id`, for error messages.
    pub(crate) fn segment_path(&self, id: u32) -> PathBuf {
        self.dir.join(segment_name(id))
    }

    /// Reads the value `ptr` points to, checking that the record is whole and belongs to
    /// `(ks, key)`.
    pub(crate) fn read(&self, ptr: &Pointer, ks: KeyspaceId, key: &[u8]) -> Result<Vec<u8>> {
        let file = self.segments.read().get(&ptr.segment).cloned();
        let file = file.ok_or_else(|| {
            Error::corruption(
                self.dir.join(segment_name(ptr.segment)),
                ptr.offset,
                "pointer to a value-log segment that does not exist",
            )
        })?;
        let total = usize::try_from(ptr.record_len(key.len()))
            .map_err(|_| Error::corruption(file.path(), ptr.offset, "pointer length overflows"))?;
        let bad = |reason: &str| Error::corruption(file.path(), ptr.offset, reason.to_string());
        let mut buf = vec![0; total];
        let mut done = 0;
        while done < total {
            let n = file.read_at(&mut buf[done..], ptr.offset + done as u64)?;
            if n == 0 {
                return Err(bad("pointer reaches past the end of its segment"));
            }
            done += n;
        }
        let h = Header::decode(&buf).map_err(bad)?;
        if h.ks != ks || h.key_len as usize != key.len() || h.value_len != ptr.len {
            return Err(bad(
                "record does not match its pointer (keyspace or lengths)",
            ));
        }
        if h.payload_crc != ptr.check {
            return Err(bad("record check value differs from the pointer's"));
        }
        let payload = &buf[HEADER_LEN..];
        if crc32c::crc32c(payload) != h.payload_crc {
            return Err(bad("record payload checksum mismatch"));
        }
        if &payload[..key.len()] != key {
            return Err(bad("record belongs to another key"));
        }
        buf.drain(..HEADER_LEN + key.len());
        Ok(buf)
    }

    /// Reads every record of every segment and checks both checksums; returns the
    /// number of records. Bytes after the last whole record are corruption, except in
    /// the active segment past its write position.
    pub(crate) fn check(&self) -> Result<u64> {
        let segments: Vec<_> = self
            .segments
            .read()
            .iter()
            .map(|(&i, f)| (i, Arc::clone(f)))
            .collect();
        let (active_id, active_len) = {
            let a = self.active.lock();
            (a.id, a.len)
        };
        let mut records = 0;
        for (id, file) in segments {
            let end = if id == active_id {
                active_len
            } else {
                file.len()?
            };
            let (valid, n) = scan(file.as_ref(), end)?;
            if valid != end {
                return Err(Error::corruption(
                    file.path(),
                    valid,
                    "value-log record fails its checksum or runs past the segment end",
                ));
            }
            records += n;
        }
        Ok(records)
    }

    /// Bytes appended since open.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }

    /// Syncs issued since open.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Live bytes per segment.
    pub(crate) fn live_bytes(&self) -> BTreeMap<u32, u64> {
        self.live.lock().clone()
    }
}

fn create_segment(vfs: &dyn Vfs, dir: &Path, id: u32) -> Result<Arc<dyn VfsFile>> {
    let file = vfs.open(&dir.join(segment_name(id)), OpenMode::CreateNew)?;
    vfs.sync_dir(dir)?;
    Ok(file)
}

/// The length of the longest prefix of `file` made of whole, checksummed records.
fn valid_prefix(file: &dyn VfsFile) -> Result<u64> {
    Ok(scan(file, file.len()?)?.0)
}

/// Scans whole, checksummed records from the start of `file` up to `len`: returns where
/// they stop and how many there are.
fn scan(file: &dyn VfsFile, len: u64) -> Result<(u64, u64)> {
    let mut records = 0;
    let mut at = 0;
    let mut head = [0u8; HEADER_LEN];
    let mut payload = Vec::new();
    while at + HEADER_LEN as u64 <= len {
        file.read_exact_at(&mut head, at)?;
        let Ok(h) = Header::decode(&head) else { break };
        if at + h.record_len() > len {
            break;
        }
        payload.resize(h.key_len as usize + h.value_len as usize, 0);
        file.read_exact_at(&mut payload, at + HEADER_LEN as u64)?;
        if crc32c::crc32c(&payload) != h.payload_crc {
            break;
        }
        at += h.record_len();
        records += 1;
    }
    Ok((at, records))
}

#[cfg(test)]
mod tests;
