//! [`FaultVfs`]: an in-memory file system that can crash and fail on purpose.
//!
//! It models what a disk holds after a power cut rather than what a process sees:
//!
//! - Each file (an inode) has a *durable* image, the content its last successful `sync`
//!   covered, and a *current* image, what reads return now. Every write, `set_len` and
//!   `punch_hole` since the last sync is also kept, in order, so a crash can apply any
//!   prefix of them to the durable image.
//! - The namespace (which name points at which inode) also has a durable and a current
//!   version. Creates, renames and removes since the last `sync_dir` of their directory
//!   are kept in one ordered log; a crash may keep any prefix of it. Syncing a file does
//!   not make its name durable, exactly as on POSIX file systems.
//! - [`FaultVfs::crash`] turns the whole file system into one state the disk could hold,
//!   chosen by [`CrashMode`]. Handles opened before the crash are stale afterwards (every
//!   call on them fails) and all locks are released, as if the process had died.
//! - [`FaultVfs::fail_after`] / [`FaultVfs::fail_from`] make chosen operations return an
//!   I/O error without changing anything.
//!
//! Every random choice comes from one generator seeded at construction, so a failing
//! crash test replays exactly from its seed. Directories themselves are durable as soon
//! as they are created (flexkv creates its directory once, before anything else).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{FileLock, Held, Mapped, OpenMode, Vfs, VfsFile};
use crate::{Error, Result};

/// The size of the unit a torn write is torn inside of.
const SECTOR: u64 = 512;

/// Which state [`FaultVfs::crash`] leaves the disk in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Everything not synced is lost: each file keeps what its last `sync` covered, and
    /// the namespace is what the last `sync_dir` of each directory covered.
    DropUnsynced,
    /// Each file keeps a random prefix (in issue order) of its unsynced writes, and the
    /// namespace keeps a random prefix of the unsynced directory changes.
    KeepPrefix,
    /// As [`CrashMode::KeepPrefix`], and the last kept write of each file is torn: it stops
    /// at a random byte, and the rest of that sector (within the write) holds garbage.
    TearLastWrite,
    /// Every file write reached the disk, but every unsynced create, rename and remove is
    /// lost: the case that catches a missing `sync_dir`.
    LoseDirChanges,
    /// One of the modes above, drawn from the file system's seeded generator.
    Random,
}

impl CrashMode {
    /// The modes [`CrashMode::Random`] draws from.
    pub const CONCRETE: [CrashMode; 4] = [
        CrashMode::DropUnsynced,
        CrashMode::KeepPrefix,
        CrashMode::TearLastWrite,
        CrashMode::LoseDirChanges,
    ];
}

/// An in-memory, crashable, fault-injecting file system. Cloning gives another handle to
/// the same file system.
#[derive(Clone)]
pub struct FaultVfs {
    state: Arc<Mutex<State>>,
    /// For a handle from [`FaultVfs::shared`]: the generation it belongs to. Once the
    /// file system crashes, every call through it fails, as a killed process makes no
    /// more calls: an engine left running by a simulated crash (its threads, say)
    /// cannot touch the files the next open recovers.
    bound: Option<u64>,
}

impl fmt::Debug for FaultVfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("FaultVfs")
            .field("files", &s.names.len())
            .field("ops", &s.ops)
            .field("generation", &s.generation)
            .finish()
    }
}

enum FileOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
    Punch { offset: u64, len: u64 },
}

impl FileOp {
    fn apply(&self, content: &mut Vec<u8>) {
        match self {
            FileOp::Write { offset, data } => write_into(content, *offset, data),
            FileOp::SetLen(len) => content.resize(to_usize(*len), 0),
            FileOp::Punch { offset, len } => {
                let end = offset.saturating_add(*len).min(content.len() as u64);
                if *offset < end {
                    content[to_usize(*offset)..to_usize(end)].fill(0);
                }
            }
        }
    }
}

#[derive(Default)]
struct Inode {
    durable: Vec<u8>,
    current: Vec<u8>,
    unsynced: Vec<FileOp>,
    /// The ranges [`VfsFile::start_writeback`] was asked for, in order: a hint that
    /// changes nothing a crash may leave, kept only for tests to read
    /// ([`FaultVfs::writebacks`]).
    writebacks: Vec<(u64, u64)>,
}

enum DirOp {
    Link {
        path: PathBuf,
        ino: u64,
    },
    Unlink {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
        ino: u64,
    },
}

impl DirOp {
    fn touches(&self, dir: &Path) -> bool {
        let in_dir = |p: &Path| p.parent() == Some(dir);
        match self {
            DirOp::Link { path, .. } | DirOp::Unlink { path } => in_dir(path),
            DirOp::Rename { from, to, .. } => in_dir(from) || in_dir(to),
        }
    }

    fn apply(&self, names: &mut BTreeMap<PathBuf, u64>) {
        match self {
            DirOp::Link { path, ino } => {
                names.insert(path.clone(), *ino);
            }
            DirOp::Unlink { path } => {
                names.remove(path);
            }
            DirOp::Rename { from, to, ino } => {
                names.remove(from);
                names.insert(to.clone(), *ino);
            }
        }
    }
}

enum Fail {
    Once(u64),
    From(u64),
    /// Every operation that changes or syncs what the disk holds, from this count of
    /// them on; reads go on.
    ChangesFrom(u64),
}

/// The operations that change what a file or directory holds, or make it durable.
fn changes(op: &str) -> bool {
    matches!(
        op,
        "write"
            | "append"
            | "set_len"
            | "punch_hole"
            | "sync"
            | "rename"
            | "remove"
            | "create_dir"
            | "sync_dir"
    )
}

struct State {
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dir_log: Vec<DirOp>,
    dirs: BTreeSet<PathBuf>,
    /// Who holds each lock: one exclusive holder, or shared holders.
    locks: BTreeMap<PathBuf, LockHeld>,
    next_lock: u64,
    generation: u64,
    ops: u64,
    /// Those of `ops` that [`changes`] names.
    changes: u64,
    fail: Option<Fail>,
    rng: SplitMix64,
}

/// A small seeded generator, so crash states replay exactly from a seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next() % n
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("in-memory file larger than the address space")
}

fn write_into(content: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = to_usize(offset);
    let end = start + data.len();
    if content.len() < end {
        content.resize(end, 0);
    }
    content[start..end].copy_from_slice(data);
}

fn injected(op: &'static str, path: &Path, n: u64) -> Error {
    Error::io(
        op,
        path,
        std::io::Error::other(format!("injected fault at operation #{n}")),
    )
}

fn not_found(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, std::io::ErrorKind::NotFound.into())
}

impl State {
    /// Counts one operation and fails it if a fault is planned for it.
    fn begin(&mut self, op: &'static str, path: &Path) -> Result<()> {
        self.ops += 1;
        let change = changes(op);
        self.changes += u64::from(change);
        let fail = match self.fail {
            Some(Fail::Once(n)) => self.ops == n,
            Some(Fail::From(n)) => self.ops >= n,
            Some(Fail::ChangesFrom(n)) => change && self.changes >= n,
            None => false,
        };
        if fail {
            return Err(injected(op, path, self.ops));
        }
        Ok(())
    }

    fn parent_exists(&self, path: &Path) -> bool {
        path.parent().is_some_and(|p| self.dirs.contains(p))
    }

    fn link_new(&mut self, path: &Path) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, Inode::default());
        self.names.insert(path.to_path_buf(), ino);
        self.dir_log.push(DirOp::Link {
            path: path.to_path_buf(),
            ino,
        });
        ino
    }

    /// The content a crash in `mode` leaves in one file.
    fn crashed_content(rng: &mut SplitMix64, inode: &Inode, mode: CrashMode) -> Vec<u8> {
        let mut content = inode.durable.clone();
        let n = inode.unsynced.len() as u64;
        match mode {
            CrashMode::DropUnsynced => {}
            CrashMode::LoseDirChanges => content = inode.current.clone(),
            CrashMode::KeepPrefix => {
                let keep = to_usize(rng.below(n + 1));
                inode.unsynced[..keep]
                    .iter()
                    .for_each(|op| op.apply(&mut content));
            }
            CrashMode::TearLastWrite => {
                if n > 0 {
                    let keep = to_usize(1 + rng.below(n));
                    inode.unsynced[..keep - 1]
                        .iter()
                        .for_each(|op| op.apply(&mut content));
                    Self::tear(rng, &inode.unsynced[keep - 1], &mut content);
                }
            }
            CrashMode::Random => unreachable!("resolved before"),
        }
        content
    }

    /// Applies `op` partially: a write stops at a random byte and the rest of that sector
    /// (inside the write) is garbage; other operations happen or not.
    fn tear(rng: &mut SplitMix64, op: &FileOp, content: &mut Vec<u8>) {
        match op {
            FileOp::Write { offset, data } if !data.is_empty() => {
                let cut = rng.below(data.len() as u64);
                write_into(content, *offset, &data[..to_usize(cut)]);
                let torn_at = offset + cut;
                let sector_end = (torn_at / SECTOR + 1) * SECTOR;
                let garbage_end = sector_end.min(offset + data.len() as u64);
                let garbage: Vec<u8> = (torn_at..garbage_end).map(|_| rng.next() as u8).collect();
                write_into(content, torn_at, &garbage);
            }
            FileOp::Write { .. } => {}
            other => {
                if rng.below(2) == 0 {
                    other.apply(content);
                }
            }
        }
    }
}

impl FaultVfs {
    /// A new, empty file system whose random choices all come from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut dirs = BTreeSet::new();
        dirs.insert(PathBuf::from("/"));
        FaultVfs {
            state: Arc::new(Mutex::new(State {
                inodes: BTreeMap::new(),
                next_ino: 1,
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                dir_log: Vec::new(),
                dirs,
                locks: BTreeMap::new(),
                next_lock: 1,
                generation: 0,
                ops: 0,
                changes: 0,
                fail: None,
                rng: SplitMix64(seed),
            })),
            bound: None,
        }
    }

    /// This file system as a shared [`Vfs`].
    /// Calls through it fail once the file system has crashed since.
    pub fn shared(&self) -> Arc<dyn Vfs> {
        let generation = self.state.lock().generation;
        Arc::new(FaultVfs {
            state: Arc::clone(&self.state),
            bound: Some(generation),
        })
    }

    /// Counts and checks one call through this handle.
    fn enter(&self, s: &mut State, op: &'static str, path: &Path) -> Result<()> {
        if self.bound.is_some_and(|g| g != s.generation) {
            let stale = std::io::Error::other("stale handle: the file system crashed since");
            return Err(Error::io(op, path, stale));
        }
        s.begin(op, path)
    }

    /// How many operations (on the file system and on its files) have been issued so far,
    /// failed ones included. A test runs a workload once to learn its count, then replays
    /// it with a fault or crash at each point.
    pub fn op_count(&self) -> u64 {
        self.state.lock().ops
    }

    /// Makes the `n`-th operation from now (1 = the next one) fail with an I/O error,
    /// and only that one. It changes nothing.
    pub fn fail_after(&self, n: u64) {
        let mut s = self.state.lock();
        s.fail = Some(Fail::Once(s.ops + n.max(1)));
    }

    /// Makes the `n`-th operation from now and every one after it fail (a dead disk),
    /// until [`FaultVfs::clear_faults`] or a crash.
    pub fn fail_from(&self, n: u64) {
        let mut s = self.state.lock();
        s.fail = Some(Fail::From(s.ops + n.max(1)));
    }

    /// How many of the operations counted by [`FaultVfs::op_count`] changed or synced
    /// what a file or directory holds (writes, appends, length changes, punched holes,
    /// syncs, renames, removals, new directories), failed ones included.
    pub fn change_count(&self) -> u64 {
        self.state.lock().changes
    }

    /// Makes the `n`-th operation that changes or syncs what the disk holds from now
    /// (see [`FaultVfs::change_count`]) and every such one after it fail, while reads
    /// go on: a disk whose writes fail, as a file system remounted read-only after an
    /// error behaves. A workload whose reads interleave with a background thread's
    /// writes in an order that varies from run to run dies at the same point of the
    /// writes each time. Until [`FaultVfs::clear_faults`] or a crash.
    pub fn fail_changes_from(&self, n: u64) {
        let mut s = self.state.lock();
        s.fail = Some(Fail::ChangesFrom(s.changes + n.max(1)));
    }

    /// Cancels any planned failure.
    pub fn clear_faults(&self) {
        self.state.lock().fail = None;
    }

    /// Crashes the machine: the file system becomes one state that the disk could hold
    /// after a power cut at this moment, chosen by `mode`. Returns the concrete mode used
    /// (a draw, for [`CrashMode::Random`]). Old handles become stale, locks are released,
    /// planned failures are cleared.
    pub fn crash(&self, mode: CrashMode) -> CrashMode {
        let mut s = self.state.lock();
        let s = &mut *s;
        let mode = match mode {
            CrashMode::Random => CrashMode::CONCRETE[to_usize(s.rng.below(4))],
            m => m,
        };
        let mut names = s.durable_names.clone();
        if matches!(mode, CrashMode::KeepPrefix | CrashMode::TearLastWrite) {
            let keep = to_usize(s.rng.below(s.dir_log.len() as u64 + 1));
            s.dir_log[..keep].iter().for_each(|op| op.apply(&mut names));
        }
        let live: BTreeSet<u64> = names.values().copied().collect();
        let mut inodes = BTreeMap::new();
        for (&ino, inode) in &s.inodes {
            // Every inode draws, live or not, so one file's fate does not depend on
            // which other files happen to survive.
            let content = State::crashed_content(&mut s.rng, inode, mode);
            if live.contains(&ino) {
                let inode = Inode {
                    durable: content.clone(),
                    current: content,
                    ..Inode::default()
                };
                inodes.insert(ino, inode);
            }
        }
        s.inodes = inodes;
        s.durable_names = names.clone();
        s.names = names;
        s.dir_log.clear();
        s.locks.clear();
        s.fail = None;
        s.generation += 1;
        mode
    }

    /// The current content of the file at `path` (what a read would return), without
    /// counting an operation. For tests.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.state.lock();
        let ino = s.names.get(path)?;
        s.inodes.get(ino).map(|i| i.current.clone())
    }

    /// The ranges (offset, length) whose write-back was asked for on the file at `path`
    /// ([`VfsFile::start_writeback`]) since it was created or the last crash, in order.
    /// For tests.
    pub fn writebacks(&self, path: &Path) -> Vec<(u64, u64)> {
        let s = self.state.lock();
        let ino = s.names.get(path);
        ino.and_then(|ino| s.inodes.get(ino))
            .map(|i| i.writebacks.clone())
            .unwrap_or_default()
    }

    /// Replaces the content of the file at `path`, durably and without counting an
    /// operation: how corruption tests flip or truncate bytes "on the disk".
    pub fn set_contents(&self, path: &Path, content: Vec<u8>) -> Result<()> {
        let mut s = self.state.lock();
        let ino = *s
            .names
            .get(path)
            .ok_or_else(|| not_found("set_contents", path))?;
        let inode = s.inodes.get_mut(&ino).expect("named inode exists");
        inode.durable = content.clone();
        inode.current = content;
        inode.unsynced.clear();
        Ok(())
    }

    fn file(&self, path: &Path, ino: u64, generation: u64) -> Arc<dyn VfsFile> {
        Arc::new(FaultFile {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
            ino,
            generation,
        })
    }
}

impl Vfs for FaultVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn VfsFile>> {
        let mut s = self.state.lock();
        self.enter(&mut s, "open", path)?;
        let existing = s.names.get(path).copied();
        let ino = match (existing, mode) {
            (Some(_), OpenMode::CreateNew) => {
                return Err(Error::io(
                    "open",
                    path,
                    std::io::ErrorKind::AlreadyExists.into(),
                ))
            }
            (Some(ino), _) => ino,
            (None, OpenMode::Existing | OpenMode::ReadOnly) => return Err(not_found("open", path)),
            (None, _) if !s.parent_exists(path) => return Err(not_found("open", path)),
            (None, _) => s.link_new(path),
        };
        let generation = s.generation;
        drop(s);
        Ok(self.file(path, ino, generation))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        let mut s = self.state.lock();
        self.enter(&mut s, "stat", path)?;
        Ok(s.names.contains_key(path) || s.dirs.contains(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.state.lock();
        self.enter(&mut s, "rename", from)?;
        let ino = *s.names.get(from).ok_or_else(|| not_found("rename", from))?;
        if !s.parent_exists(to) {
            return Err(not_found("rename", to));
        }
        s.names.remove(from);
        s.names.insert(to.to_path_buf(), ino);
        s.dir_log.push(DirOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            ino,
        });
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut s = self.state.lock();
        self.enter(&mut s, "remove", path)?;
        if s.names.remove(path).is_none() {
            return Err(not_found("remove", path));
        }
        s.dir_log.push(DirOp::Unlink {
            path: path.to_path_buf(),
        });
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut s = self.state.lock();
        self.enter(&mut s, "list", dir)?;
        if !s.dirs.contains(dir) {
            return Err(not_found("list", dir));
        }
        Ok(s.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let mut s = self.state.lock();
        self.enter(&mut s, "create_dir", dir)?;
        if s.names.contains_key(dir) {
            return Err(Error::io(
                "create_dir",
                dir,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        for ancestor in dir.ancestors() {
            s.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut s = self.state.lock();
        self.enter(&mut s, "sync_dir", dir)?;
        if !s.dirs.contains(dir) {
            return Err(not_found("sync_dir", dir));
        }
        let log = std::mem::take(&mut s.dir_log);
        for op in log {
            if op.touches(dir) {
                op.apply(&mut s.durable_names);
            } else {
                s.dir_log.push(op);
            }
        }
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<FileLock> {
        let mut s = self.state.lock();
        self.enter(&mut s, "lock", path)?;
        if s.locks.contains_key(path) {
            return Err(Error::Locked(path.to_path_buf()));
        }
        if !s.names.contains_key(path) {
            if !s.parent_exists(path) {
                return Err(not_found("lock", path));
            }
            s.link_new(path);
        }
        let token = s.next_lock;
        s.next_lock += 1;
        s.locks
            .insert(path.to_path_buf(), LockHeld::Exclusive(token));
        Ok(self.lock_guard(path, token))
    }

    fn lock_shared(&self, path: &Path) -> Result<FileLock> {
        let mut s = self.state.lock();
        self.enter(&mut s, "lock", path)?;
        if !s.names.contains_key(path) {
            return Err(not_found("lock", path));
        }
        let token = s.next_lock;
        s.next_lock += 1;
        match s
            .locks
            .entry(path.to_path_buf())
            .or_insert(LockHeld::Shared(BTreeSet::new()))
        {
            LockHeld::Exclusive(_) => return Err(Error::Locked(path.to_path_buf())),
            LockHeld::Shared(holders) => holders.insert(token),
        };
        Ok(self.lock_guard(path, token))
    }
}

impl FaultVfs {
    fn lock_guard(&self, path: &Path, token: u64) -> FileLock {
        FileLock::new(FaultLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
            token,
        })
    }
}

/// Who holds a lock of the fault-injecting file system.
#[derive(Debug)]
enum LockHeld {
    Exclusive(u64),
    Shared(BTreeSet<u64>),
}

struct FaultLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    token: u64,
}

impl Drop for FaultLock {
    fn drop(&mut self) {
        let mut s = self.state.lock();
        // After a crash the lock table was cleared and may hold someone else's lock.
        let gone = match s.locks.get_mut(&self.path) {
            Some(LockHeld::Exclusive(t)) => *t == self.token,
            Some(LockHeld::Shared(holders)) => holders.remove(&self.token) && holders.is_empty(),
            None => false,
        };
        if gone {
            s.locks.remove(&self.path);
        }
    }
}

struct FaultFile {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    ino: u64,
    generation: u64,
}

impl fmt::Debug for FaultFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultFile")
            .field("path", &self.path)
            .field("ino", &self.ino)
            .finish()
    }
}

impl FaultFile {
    /// Runs `f` on this file's inode, after counting the operation and checking that the
    /// handle survived no crash.
    fn with_inode<T>(&self, op: &'static str, f: impl FnOnce(&mut Inode) -> T) -> Result<T> {
        let mut s = self.state.lock();
        if s.generation != self.generation {
            let stale = std::io::Error::other("stale handle: the file system crashed since open");
            return Err(Error::io(op, &self.path, stale));
        }
        s.begin(op, &self.path)?;
        let inode = s
            .inodes
            .get_mut(&self.ino)
            .expect("an open handle keeps its inode until a crash");
        Ok(f(inode))
    }

    fn mutate(&self, op: &'static str, change: FileOp) -> Result<()> {
        self.with_inode(op, |inode| {
            change.apply(&mut inode.current);
            inode.unsynced.push(change);
        })
    }
}

impl VfsFile for FaultFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.with_inode("read", |inode| {
            let len = inode.current.len() as u64;
            if offset >= len {
                return 0;
            }
            let n = (len - offset).min(buf.len() as u64) as usize;
            let start = to_usize(offset);
            buf[..n].copy_from_slice(&inode.current[start..start + n]);
            n
        })
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        let data = data.to_vec();
        self.mutate("write", FileOp::Write { offset, data })
    }

    fn append(&self, data: &[u8]) -> Result<u64> {
        self.with_inode("append", |inode| {
            let offset = inode.current.len() as u64;
            let change = FileOp::Write {
                offset,
                data: data.to_vec(),
            };
            change.apply(&mut inode.current);
            inode.unsynced.push(change);
            offset
        })
    }

    fn len(&self) -> Result<u64> {
        self.with_inode("stat", |inode| inode.current.len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.mutate("set_len", FileOp::SetLen(len))
    }

    /// A copy of the first `len` bytes as they are now, taken without counting an
    /// operation (reading through a view makes no call on the file), so it is never a
    /// crash point: what a mapping of bytes that do not change would show.
    fn map(&self, len: u64) -> Option<Mapped> {
        let s = self.state.lock();
        if s.generation != self.generation {
            return None;
        }
        let bytes = &s.inodes.get(&self.ino)?.current;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n > 0 && n <= bytes.len())?;
        Some(Mapped(Held::Copy(bytes[..len].into())))
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        self.mutate("punch_hole", FileOp::Punch { offset, len })
    }

    /// Notes the range for [`FaultVfs::writebacks`], and nothing else: not an operation
    /// (it neither counts nor fails), since a crash may keep or lose unsynced writes
    /// whether or not their write-back was started.
    fn start_writeback(&self, offset: u64, len: u64) {
        let mut s = self.state.lock();
        if s.generation == self.generation {
            if let Some(inode) = s.inodes.get_mut(&self.ino) {
                inode.writebacks.push((offset, len));
            }
        }
    }

    fn sync(&self) -> Result<()> {
        self.with_inode("sync", |inode| {
            inode.durable = inode.current.clone();
            inode.unsynced.clear();
        })
    }
}

#[cfg(test)]
mod tests;
