//! Version history (SkimpyFTL §3): when the committer replaces or removes a version that
//! a live snapshot may still read, it first writes that version to the value log as a
//! *history record*, and the record that replaces it points there (its prior pointer).
//! A reader whose sequence is older than the record it finds walks the chain.
//!
//! A history record is a value-log record whose keyspace field has its top bit set
//! ([`HISTORY`]) and whose value is the superseding sequence (varint) followed by the
//! version encoded as a sorted-keyspace [`Record`] (with its own prior pointer and
//! checksum). Byte layout in `docs/format.md`.

use super::record::{Record, RecordValue};
use crate::le::{get_varint as varint, put_varint};
use crate::memtable::{KeyspaceId, Value};
use crate::vlog::{Holder, NewValue, Pointer, ValueLog};
use crate::{Error, Result};

/// The keyspace field's bit that marks a history record in the value log; keyspace
/// numbers stay below it.
pub(crate) const HISTORY: KeyspaceId = 1 << 31;

/// One version of a key as the sorted keyspace holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    /// The sequence of the batch that wrote it.
    pub(crate) seq: u64,
    /// Its value.
    pub(crate) value: Value,
    /// The version it replaced, if a snapshot may still need that one.
    pub(crate) prior: Option<Pointer>,
}

impl Version {
    pub(crate) fn from_record(r: &Record<'_>) -> Version {
        let value = match r.value {
            RecordValue::Inline(v) => Value::Inline(v.into()),
            RecordValue::Separated(p) => Value::Separated(p),
            RecordValue::Tombstone => Value::Tombstone,
        };
        Version {
            seq: r.seq,
            value,
            prior: r.prior,
        }
    }

    /// The record that stores this version under `key`.
    #[cfg(test)]
    pub(crate) fn record<'a>(&'a self, key: &'a [u8]) -> Record<'a> {
        Record {
            seq: self.seq,
            key,
            value: record_value(&self.value),
            prior: self.prior,
        }
    }
}

/// A memtable value as a record's value, borrowed.
pub(crate) fn record_value(v: &Value) -> RecordValue<'_> {
    match v {
        Value::Inline(v) => RecordValue::Inline(v),
        Value::Separated(p) => RecordValue::Separated(*p),
        Value::Tombstone => RecordValue::Tombstone,
    }
}

/// Appends `v` (the version of its key in keyspace `ks` that `superseded` replaced) to
/// the value log as a history record; returns where it went. Not durable until the
/// value log is synced.
pub(crate) fn write(
    vlog: &ValueLog,
    ks: KeyspaceId,
    v: &Record<'_>,
    superseded: u64,
) -> Result<Pointer> {
    let mut payload = Vec::new();
    put_varint(&mut payload, superseded);
    v.encode(&mut payload);
    let ptrs = vlog.append_as(
        &[NewValue {
            ks: ks | HISTORY,
            key: v.key,
            seq: v.seq,
            value: &payload,
        }],
        Holder::Pinned(superseded),
    )?;
    Ok(ptrs[0])
}

/// Reads the history record at `ptr`: the superseding sequence and the version.
pub(crate) fn read(
    vlog: &ValueLog,
    ptr: &Pointer,
    ks: KeyspaceId,
    key: &[u8],
) -> Result<(u64, Version)> {
    let payload = vlog.read(ptr, ks | HISTORY, key)?;
    let bad = |why: &str| {
        Error::corruption(
            vlog.segment_path(ptr.segment),
            ptr.offset,
            format!("history record: {why}"),
        )
    };
    let mut at = 0;
    let superseded = varint(&payload, &mut at).map_err(bad)?;
    let (r, n) = Record::decode(&payload[at..]).map_err(bad)?;
    if at + n != payload.len() || r.key != key || r.seq >= superseded {
        return Err(bad("its version does not belong where it was found"));
    }
    Ok((superseded, Version::from_record(&r)))
}

/// The version a reader at `seq` sees, given the newest one `found`: `found` itself if
/// it is not newer than `seq`, else the first version down its chain that is; `None`
/// if the chain ends first (the key did not exist at `seq`).
pub(crate) fn at(
    vlog: &ValueLog,
    ks: KeyspaceId,
    key: &[u8],
    found: Version,
    seq: u64,
) -> Result<Option<Version>> {
    let mut v = found;
    loop {
        if v.seq <= seq {
            return Ok(Some(v));
        }
        let Some(p) = v.prior else {
            return Ok(None);
        };
        let (superseded, older) = read(vlog, &p, ks, key)?;
        if superseded > v.seq || older.seq >= v.seq {
            return Err(Error::corruption(
                vlog.segment_path(p.segment),
                p.offset,
                "a history chain does not go back in time",
            ));
        }
        v = older;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealVfs;
    use std::sync::Arc;

    #[test]
    fn a_chain_gives_each_reader_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let vlog = ValueLog::open(Arc::new(RealVfs), dir.path(), 1 << 20).unwrap();
        let v1 = Version {
            seq: 10,
            value: Value::Inline(b"ten".to_vec().into()),
            prior: None,
        };
        let p1 = write(&vlog, 3, &v1.record(b"k"), 20).unwrap();
        let v2 = Version {
            seq: 20,
            value: Value::Tombstone,
            prior: Some(p1),
        };
        let p2 = write(&vlog, 3, &v2.record(b"k"), 30).unwrap();
        let v3 = Version {
            seq: 30,
            value: Value::Inline(b"thirty".to_vec().into()),
            prior: Some(p2),
        };
        let see = |seq| at(&vlog, 3, b"k", v3.clone(), seq).unwrap();
        assert_eq!(see(5), None, "before the key existed");
        assert_eq!(see(10), Some(v1.clone()));
        assert_eq!(see(19), Some(v1.clone()));
        assert_eq!(see(25), Some(v2.clone()), "the delete is a version too");
        assert_eq!(see(30), Some(v3.clone()));
        assert_eq!(read(&vlog, &p2, 3, b"k").unwrap(), (30, v2));
        // The chain is bound to its keyspace and key.
        assert!(read(&vlog, &p1, 4, b"k").is_err());
        assert!(read(&vlog, &p1, 3, b"j").is_err());
        // A plain value record is not a history record.
        let plain = vlog
            .append(&[NewValue {
                ks: 3,
                key: b"k",
                seq: 40,
                value: b"not history",
            }])
            .unwrap()[0];
        assert!(read(&vlog, &plain, 3, b"k").is_err());
    }
}
