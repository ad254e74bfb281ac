//! The manifest: which keyspaces exist (name, number, kind), the sequence the
//! keyspaces have applied, and how many bytes of each value-log segment the keyspaces'
//! records point to (absent while a commit or GC write-back is changing them, so a
//! crash then makes the next open count again). Byte layout in `docs/format.md`.
//!
//! It is never written in place: a new `MANIFEST.tmp` is written and synced, renamed
//! over `MANIFEST`, and the directory synced, so a crash leaves the old or the new one.

use std::collections::BTreeMap;
use std::path::Path;

use crate::io::{OpenMode, Vfs};
use crate::le::{get_u16, get_u32, get_u64, push_u16, push_u32, push_u64};
use crate::memtable::KeyspaceId;
use crate::{Error, Result};

/// The manifest's file name.
pub(crate) const FILE: &str = "MANIFEST";
const TMP: &str = "MANIFEST.tmp";
const MAGIC: &[u8; 8] = b"FLEXKVMF";
/// The manifest format version this build writes and the newest it reads. Version 1
/// had no value-log counts.
pub(crate) const VERSION: u32 = 2;

/// How a keyspace stores its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyspaceKind {
    /// Keys kept in order: point reads, ranges and prefixes (FlexDB).
    Sorted,
}

impl KeyspaceKind {
    fn code(self) -> u8 {
        match self {
            KeyspaceKind::Sorted => 1,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        (c == 1).then_some(KeyspaceKind::Sorted)
    }
}

/// One keyspace as the manifest records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) id: KeyspaceId,
    pub(crate) kind: KeyspaceKind,
    pub(crate) name: String,
}

/// The manifest's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// Every sequence at or below this is in the keyspaces, not only in the WAL.
    pub(crate) applied: u64,
    pub(crate) next_id: KeyspaceId,
    pub(crate) keyspaces: Vec<Entry>,
    /// Value-log segment → bytes of its records that keyspace records point to, as of
    /// the keyspaces' durable state; `None` if that is not known (see the module docs).
    pub(crate) vlog_store: Option<BTreeMap<u32, u64>>,
}

/// The default keyspace's name.
pub(crate) const DEFAULT: &str = "default";

impl Manifest {
    /// A new database's manifest: the default keyspace only.
    pub(crate) fn new() -> Self {
        Manifest {
            applied: 0,
            next_id: 1,
            keyspaces: vec![Entry {
                id: 0,
                kind: KeyspaceKind::Sorted,
                name: DEFAULT.to_string(),
            }],
            vlog_store: Some(BTreeMap::new()),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        push_u64(&mut body, self.applied);
        push_u32(&mut body, self.next_id);
        push_u32(&mut body, self.keyspaces.len() as u32);
        for k in &self.keyspaces {
            push_u32(&mut body, k.id);
            body.push(k.kind.code());
            push_u16(&mut body, k.name.len() as u16);
            body.extend_from_slice(k.name.as_bytes());
        }
        match &self.vlog_store {
            None => body.push(0),
            Some(counts) => {
                body.push(1);
                push_u32(&mut body, counts.len() as u32);
                for (&seg, &bytes) in counts {
                    push_u32(&mut body, seg);
                    push_u64(&mut body, bytes);
                }
            }
        }
        let mut out = MAGIC.to_vec();
        push_u32(&mut out, VERSION);
        push_u32(&mut out, body.len() as u32);
        out.extend_from_slice(&body);
        let crc = crate::checksum::crc32c(&out);
        push_u32(&mut out, crc);
        out
    }

    /// Decodes a manifest file's bytes. `Ok(None)` means the magic number is wrong: the
    /// file is not a flexkv manifest at all.
    fn decode(path: &Path, b: &[u8]) -> Result<Option<Manifest>> {
        if b.len() < 20 || &b[..8] != MAGIC {
            return Ok(None);
        }
        let version = get_u32(b, 8);
        if version > VERSION {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: VERSION,
            });
        }
        let bad = |off: usize, why: &str| Error::corruption(path, off as u64, why.to_string());
        let body_len = get_u32(b, 12) as usize;
        if b.len() != 16 + body_len + 4 {
            return Err(bad(12, "manifest length does not match its header"));
        }
        if crate::checksum::crc32c(&b[..16 + body_len]) != get_u32(b, 16 + body_len) {
            return Err(bad(0, "manifest checksum mismatch"));
        }
        let body = &b[16..16 + body_len];
        let short = || bad(16, "manifest body cut short");
        let applied = get_u64(body.get(..8).ok_or_else(short)?, 0);
        let next_id = get_u32(body.get(8..12).ok_or_else(short)?, 0);
        let n = get_u32(body.get(12..16).ok_or_else(short)?, 0);
        let mut at = 16;
        let mut keyspaces = Vec::new();
        for _ in 0..n {
            let head = body.get(at..at + 7).ok_or_else(short)?;
            let id = get_u32(head, 0);
            let kind = KeyspaceKind::from_code(head[4])
                .ok_or_else(|| bad(16 + at + 4, "unknown keyspace kind"))?;
            let len = get_u16(head, 5) as usize;
            let name = body.get(at + 7..at + 7 + len).ok_or_else(short)?;
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| bad(16 + at + 7, "keyspace name is not UTF-8"))?;
            keyspaces.push(Entry { id, kind, name });
            at += 7 + len;
        }
        let vlog_store = if version < 2 {
            None
        } else {
            match body.get(at).ok_or_else(short)? {
                0 => {
                    at += 1;
                    None
                }
                1 => {
                    let n = get_u32(body.get(at + 1..at + 5).ok_or_else(short)?, 0);
                    at += 5;
                    let mut counts = BTreeMap::new();
                    for _ in 0..n {
                        let e = body.get(at..at + 12).ok_or_else(short)?;
                        counts.insert(get_u32(e, 0), get_u64(e, 4));
                        at += 12;
                    }
                    Some(counts)
                }
                _ => return Err(bad(16 + at, "unknown value-log count marker")),
            }
        };
        if at != body.len() {
            return Err(bad(16 + at, "bytes after the last field"));
        }
        Ok(Some(Manifest {
            applied,
            next_id,
            keyspaces,
            vlog_store,
        }))
    }

    /// Reads `dir/MANIFEST`: `Ok(None)` if there is none, [`Error::NotADatabase`] if the
    /// file is not a manifest.
    pub(crate) fn read(vfs: &dyn Vfs, dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(FILE);
        if !vfs.exists(&path)? {
            return Ok(None);
        }
        let file = vfs.open(&path, OpenMode::Existing)?;
        let mut b = vec![
            0;
            usize::try_from(file.len()?)
                .unwrap_or(usize::MAX)
                .min(1 << 26)
        ];
        file.read_exact_at(&mut b, 0)?;
        match Manifest::decode(&path, &b)? {
            Some(m) => Ok(Some(m)),
            None => Err(Error::NotADatabase {
                path: dir.to_path_buf(),
                reason: "MANIFEST does not start with the flexkv magic number".into(),
            }),
        }
    }

    /// Replaces `dir/MANIFEST` with this one atomically and durably.
    pub(crate) fn write(&self, vfs: &dyn Vfs, dir: &Path) -> Result<()> {
        let tmp = dir.join(TMP);
        if vfs.exists(&tmp)? {
            vfs.remove(&tmp)?;
        }
        let file = vfs.open(&tmp, OpenMode::CreateNew)?;
        file.write_at(&self.encode(), 0)?;
        file.sync()?;
        vfs.rename(&tmp, &dir.join(FILE))?;
        vfs.sync_dir(dir)
    }
}

/// Whether `name` is a file a flexkv directory may hold before its manifest exists (a
/// crash while creating the database can leave these).
pub(crate) fn is_creation_leftover(name: &str) -> bool {
    name == TMP || name == super::LOCK_FILE
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::FaultVfs;

    #[test]
    fn a_manifest_round_trips_and_damage_is_caught() {
        let mut m = Manifest::new();
        m.applied = 99;
        m.next_id = 3;
        m.keyspaces.push(Entry {
            id: 2,
            kind: KeyspaceKind::Sorted,
            name: "users".into(),
        });
        m.vlog_store = Some(BTreeMap::from([(3, 1 << 40), (7, 12)]));
        let b = m.encode();
        let mut unknown = m.clone();
        unknown.vlog_store = None;
        assert_eq!(
            Manifest::decode(Path::new("/m"), &unknown.encode()).unwrap(),
            Some(unknown)
        );
        let p = Path::new("/m");
        assert_eq!(Manifest::decode(p, &b).unwrap(), Some(m));
        for i in 8..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 1;
            let r = Manifest::decode(p, &bad);
            assert!(r.is_err(), "flip at {i} accepted: {r:?}");
        }
        for cut in 0..b.len() {
            assert!(!matches!(Manifest::decode(p, &b[..cut]), Ok(Some(_))));
        }
        let mut newer = b.clone();
        newer[8] = 3;
        assert!(matches!(
            Manifest::decode(p, &newer),
            Err(Error::UnsupportedVersion { found: 3, .. })
        ));
    }

    proptest::proptest! {
        /// Any bytes are a manifest, not one, or an error; never a panic.
        #[test]
        fn decoding_never_panics(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&tail);
            let _ = Manifest::decode(Path::new("/m"), &b);
            let _ = Manifest::decode(Path::new("/m"), &tail);
            // A garbage body under a valid header and checksum reaches the body parser.
            let mut framed = MAGIC.to_vec();
            push_u32(&mut framed, VERSION);
            push_u32(&mut framed, tail.len() as u32);
            framed.extend_from_slice(&tail);
            let crc = crate::checksum::crc32c(&framed);
            push_u32(&mut framed, crc);
            let _ = Manifest::decode(Path::new("/m"), &framed);
        }
    }

    #[test]
    fn write_replaces_the_manifest_durably() {
        let vfs = FaultVfs::new(1);
        let dir = Path::new("/db");
        vfs.create_dir_all(dir).unwrap();
        assert_eq!(Manifest::read(&vfs, dir).unwrap(), None);
        let mut m = Manifest::new();
        m.write(&vfs, dir).unwrap();
        m.applied = 5;
        m.write(&vfs, dir).unwrap();
        vfs.crash(crate::io::CrashMode::DropUnsynced);
        assert_eq!(Manifest::read(&vfs, dir).unwrap(), Some(m));
    }
}
