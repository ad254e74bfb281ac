//! The FlexTree file: the persistent FlexTree, written copy-on-write (FlexSpace §4.2).
//!
//! Pages of [`PAGE`] bytes. Pages 0 and 1 are two header slots; a checkpoint with sequence
//! number `s` writes slot `s % 2`, so the previous header stays intact until the new one
//! is durable, and the valid header with the highest sequence is the tree. Every other
//! page holds one node, with a CRC32C over the page.
//!
//! A checkpoint writes every node that changed since the last one, and every ancestor of
//! such a node (its child's page moved), into pages the last durable checkpoint does not
//! use: a crash at any point leaves the last durable tree whole. Order: node pages, sync,
//! header, sync. Only then are the old version's pages free for the next checkpoint.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::crc::{self, BlockSum, CrcTable};
use crate::flextree::image::NodeImage;
use crate::flextree::{FlexTree, FlexTreeOptions, NodeId};
use crate::io::VfsFile;
use crate::le::{get_u32 as get32, get_u64 as get, put_u32 as put32, put_u64 as put};
use crate::{Error, Result};

pub(crate) const PAGE: usize = 4096;
const MAGIC: &[u8; 8] = b"FLXSTREE";
const VERSION: u32 = 1;
const NODE_HEAD: usize = 24;
const LEAF: u8 = 1;
const INTERNAL: u8 = 2;

/// The most leaf entries and internal children a page holds.
pub(crate) const MAX_LEAF_CAPACITY: usize = (PAGE - NODE_HEAD) / 24;
pub(crate) const MAX_INTERNAL_CAPACITY: usize = (PAGE - NODE_HEAD + 8) / 16;

/// What a header records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub seq: u64,
    pub root: u64,
    pub leaf_capacity: u32,
    pub internal_capacity: u32,
    pub len: u64,
    pub extents: u64,
    pub pages: u64,
    /// Chunks of the data-block checksum table, and the directory pages that list
    /// their pages.
    pub chunks: u64,
    pub directory: Vec<u64>,
}

/// Offset of the directory in the header page, and the most directory pages it holds.
const DIRECTORY_AT: usize = 80;
const MAX_DIRECTORY: usize = (PAGE - 4 - DIRECTORY_AT) / 8;
/// Page numbers per directory page.
const PER_DIRECTORY: usize = (PAGE - NODE_HEAD) / 8;
const CHUNK_KIND: u8 = 3;
const DIRECTORY_KIND: u8 = 4;

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut h = vec![0u8; PAGE];
        h[..8].copy_from_slice(MAGIC);
        put32(&mut h, 8, VERSION);
        put32(&mut h, 12, PAGE as u32);
        put(&mut h, 16, self.seq);
        put(&mut h, 24, self.root);
        put32(&mut h, 32, self.leaf_capacity);
        put32(&mut h, 36, self.internal_capacity);
        put(&mut h, 40, self.len);
        put(&mut h, 48, self.extents);
        put(&mut h, 56, self.pages);
        put(&mut h, 64, self.chunks);
        put(&mut h, 72, self.directory.len() as u64);
        for (i, &p) in self.directory.iter().enumerate() {
            put(&mut h, DIRECTORY_AT + 8 * i, p);
        }
        let crc = crate::checksum::crc32c(&h[..PAGE - 4]);
        put32(&mut h, PAGE - 4, crc);
        h
    }

    /// `Ok(None)` for a slot that holds no valid header (never written, or torn).
    fn decode(h: &[u8], file: &dyn VfsFile, at: u64) -> Result<Option<Header>> {
        if &h[..8] != MAGIC || crate::checksum::crc32c(&h[..PAGE - 4]) != get32(h, PAGE - 4) {
            return Ok(None);
        }
        let version = get32(h, 8);
        if version > VERSION {
            return Err(Error::corruption(
                file.path(),
                at + 8,
                format!("tree file version {version} is newer than {VERSION}"),
            ));
        }
        if get32(h, 12) as usize != PAGE {
            return Err(Error::corruption(
                file.path(),
                at + 12,
                "unexpected page size",
            ));
        }
        let dir_len = get(h, 72) as usize;
        if dir_len > MAX_DIRECTORY {
            return Err(Error::corruption(
                file.path(),
                at + 72,
                format!("directory of {dir_len} pages"),
            ));
        }
        Ok(Some(Header {
            seq: get(h, 16),
            root: get(h, 24),
            leaf_capacity: get32(h, 32),
            internal_capacity: get32(h, 36),
            len: get(h, 40),
            extents: get(h, 48),
            pages: get(h, 56),
            chunks: get(h, 64),
            directory: (0..dir_len).map(|i| get(h, DIRECTORY_AT + 8 * i)).collect(),
        }))
    }
}

fn encode_node(image: &NodeImage, seq: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    put(&mut p, 16, seq);
    match image {
        NodeImage::Leaf(entries) => {
            p[4] = LEAF;
            put32(&mut p, 8, entries.len() as u32);
            for (i, &(poff, len, addr, tag)) in entries.iter().enumerate() {
                let at = NODE_HEAD + i * 24;
                put(&mut p, at, poff);
                put(&mut p, at + 8, len);
                put(&mut p, at + 16, addr | (u64::from(tag) << 56));
            }
        }
        NodeImage::Internal { pivots, children } => {
            p[4] = INTERNAL;
            put32(&mut p, 8, children.len() as u32);
            for (i, &v) in pivots.iter().chain(children.iter()).enumerate() {
                put(&mut p, NODE_HEAD + i * 8, v);
            }
        }
    }
    let crc = crate::checksum::crc32c(&p[4..]);
    put32(&mut p, 0, crc);
    p
}

fn decode_node(p: &[u8], file: &dyn VfsFile, at: u64) -> Result<NodeImage> {
    if crate::checksum::crc32c(&p[4..]) != get32(p, 0) {
        return Err(Error::corruption(
            file.path(),
            at,
            "node page checksum mismatch",
        ));
    }
    let count = get32(p, 8) as usize;
    match p[4] {
        LEAF if count <= MAX_LEAF_CAPACITY => Ok(NodeImage::Leaf(
            (0..count)
                .map(|i| {
                    let at = NODE_HEAD + i * 24;
                    let at_word = get(p, at + 16);
                    (
                        get(p, at),
                        get(p, at + 8),
                        at_word & ((1 << 56) - 1),
                        (at_word >> 56) as u8,
                    )
                })
                .collect(),
        )),
        INTERNAL if (1..=MAX_INTERNAL_CAPACITY).contains(&count) => {
            let words: Vec<u64> = (0..2 * count - 1)
                .map(|i| get(p, NODE_HEAD + i * 8))
                .collect();
            Ok(NodeImage::Internal {
                pivots: words[..count - 1].to_vec(),
                children: words[count - 1..].to_vec(),
            })
        }
        kind => Err(Error::corruption(
            file.path(),
            at + 4,
            format!("bad node kind {kind} or count {count}"),
        )),
    }
}

use super::read_or_corrupt as read_page;

fn encode_words(kind: u8, words: &[u64], seq: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    p[4] = kind;
    put32(&mut p, 8, words.len() as u32);
    put(&mut p, 16, seq);
    for (i, &w) in words.iter().enumerate() {
        put(&mut p, NODE_HEAD + 8 * i, w);
    }
    let crc = crate::checksum::crc32c(&p[4..]);
    put32(&mut p, 0, crc);
    p
}

fn decode_words(p: &[u8], kind: u8, file: &dyn VfsFile, at: u64) -> Result<Vec<u64>> {
    let count = get32(p, 8) as usize;
    if crate::checksum::crc32c(&p[4..]) != get32(p, 0) || p[4] != kind || count > PER_DIRECTORY {
        return Err(Error::corruption(
            file.path(),
            at,
            format!("bad page of kind {kind}"),
        ));
    }
    Ok((0..count).map(|i| get(p, NODE_HEAD + 8 * i)).collect())
}

/// The FlexTree file and the bookkeeping copy-on-write needs.
pub(crate) struct TreeFile {
    file: Arc<dyn VfsFile>,
    /// The page each node id was last written to.
    page_of: HashMap<NodeId, u64>,
    /// The page each checksum-table chunk was last written to.
    chunk_page: Vec<u64>,
    /// Pages the last durable checkpoint uses: never written over.
    durable: BTreeSet<u64>,
    /// One past the highest page ever used.
    pages: u64,
    seq: u64,
    /// Bytes written to the tree file, for write amplification.
    pub bytes_written: u64,
}

impl TreeFile {
    /// Opens the tree file: loads the newest valid checkpoint (the tree and the data
    /// checksums), or (a new file) makes an empty tree and checkpoints it.
    pub(crate) fn open(
        file: Arc<dyn VfsFile>,
        opts: FlexTreeOptions,
    ) -> Result<(TreeFile, FlexTree, CrcTable)> {
        let mut headers = Vec::new();
        if file.len()? >= 2 * PAGE as u64 {
            let mut h = vec![0u8; PAGE];
            for slot in 0..2u64 {
                file.read_exact_at(&mut h, slot * PAGE as u64)?;
                if let Some(header) = Header::decode(&h, &*file, slot * PAGE as u64)? {
                    headers.push(header);
                }
            }
        }
        let Some(header) = headers.into_iter().max_by_key(|h| h.seq) else {
            if file.len()? > 0 {
                return Err(Error::corruption(
                    file.path(),
                    0,
                    "no valid header in the tree file",
                ));
            }
            let mut tf = TreeFile {
                file,
                page_of: HashMap::new(),
                chunk_page: Vec::new(),
                durable: BTreeSet::new(),
                pages: 2,
                seq: 0,
                bytes_written: 0,
            };
            let mut tree = FlexTree::with_options(opts)?;
            let mut table = CrcTable::default();
            tf.checkpoint(&mut tree, &mut table)?;
            return Ok((tf, tree, table));
        };
        let opts = FlexTreeOptions {
            leaf_capacity: header.leaf_capacity as usize,
            internal_capacity: header.internal_capacity as usize,
        };
        let mut page_of = HashMap::new();
        let mut durable = BTreeSet::new();
        let mut buf = vec![0u8; PAGE];
        let claim = |page: u64, durable: &mut BTreeSet<u64>| {
            if page < 2 || page >= header.pages || !durable.insert(page) {
                return Err(Error::corruption(
                    file.path(),
                    0,
                    format!("bad or repeated page {page}"),
                ));
            }
            Ok(page * PAGE as u64)
        };
        let tree = FlexTree::from_images(
            opts,
            header.root,
            |page| {
                let at = claim(page, &mut durable)?;
                read_page(&*file, &mut buf, at)?;
                decode_node(&buf, &*file, at)
            },
            |page, id| {
                page_of.insert(id, page);
            },
            |why| {
                Error::corruption(
                    file.path(),
                    0,
                    format!("the stored tree is malformed: {why}"),
                )
            },
        )?;
        if (tree.len(), tree.extent_count()) != (header.len, header.extents) {
            return Err(Error::corruption(
                file.path(),
                0,
                "the tree disagrees with its header",
            ));
        }
        let mut chunk_page = Vec::new();
        for &d in &header.directory {
            let at = claim(d, &mut durable)?;
            read_page(&*file, &mut buf, at)?;
            chunk_page.extend(decode_words(&buf, DIRECTORY_KIND, &*file, at)?);
        }
        if chunk_page.len() as u64 != header.chunks {
            return Err(Error::corruption(
                file.path(),
                0,
                "the checksum directory disagrees with its header",
            ));
        }
        let mut table = CrcTable::default();
        for (c, &page) in chunk_page.iter().enumerate() {
            let at = claim(page, &mut durable)?;
            read_page(&*file, &mut buf, at)?;
            let words = decode_words(&buf, CHUNK_KIND, &*file, at)?;
            if words.len() > crc::CHUNK {
                return Err(Error::corruption(
                    file.path(),
                    at,
                    "oversized checksum chunk",
                ));
            }
            let sums: Vec<BlockSum> = words
                .iter()
                .map(|&w| BlockSum {
                    fill: w as u32,
                    crc: (w >> 32) as u32,
                })
                .collect();
            table.load_chunk(c, &sums);
        }
        let tf = TreeFile {
            file,
            page_of,
            chunk_page,
            durable,
            pages: header.pages,
            seq: header.seq,
            bytes_written: 0,
        };
        Ok((tf, tree, table))
    }

    /// Bytes of the pages the last durable checkpoint uses.
    pub(crate) fn durable_bytes(&self) -> u64 {
        self.durable.len() as u64 * PAGE as u64
    }

    /// The sequence number of the last durable checkpoint.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Writes a new checkpoint of `tree` and the data checksums (Figure 9: pages, sync,
    /// header, sync) into pages the last durable checkpoint does not use, and marks both
    /// clean. Returns the new sequence number.
    pub(crate) fn checkpoint(&mut self, tree: &mut FlexTree, table: &mut CrcTable) -> Result<u64> {
        let seq = self.write_checkpoint(tree, table)?;
        TreeFile::checkpointed(tree, table);
        Ok(seq)
    }

    /// [`checkpoint`](Self::checkpoint) but for its last step: every write and sync,
    /// which need only shared access to the tree and the table, so that readers of
    /// them go on meanwhile. [`TreeFile::checkpointed`] must follow before either
    /// changes, or the next checkpoint would write the nodes again (harmless) and, if
    /// one changed in between, would miss that change.
    pub(crate) fn write_checkpoint(&mut self, tree: &FlexTree, table: &CrcTable) -> Result<u64> {
        let seq = self.seq + 1;
        let durable = std::mem::take(&mut self.durable);
        match self.write_pages(seq, tree, table, &durable) {
            Ok((page_of, chunk_page, directory, pages)) => {
                self.finish_checkpoint(seq, tree, &page_of, &chunk_page, directory, pages)
                    .inspect_err(|_| self.durable = durable)?;
                self.page_of = page_of;
                self.chunk_page = chunk_page;
                self.pages = pages;
                self.seq = seq;
                Ok(seq)
            }
            Err(e) => {
                self.durable = durable;
                Err(e)
            }
        }
    }

    /// The last step of a checkpoint [`write_checkpoint`](Self::write_checkpoint)
    /// wrote: the tree's and the table's changes are all in it now.
    pub(crate) fn checkpointed(tree: &mut FlexTree, table: &mut CrcTable) {
        tree.take_freed();
        tree.clear_dirty();
        table.clear_dirty();
    }

    /// Writes every page a checkpoint changes (dirty nodes and the nodes above them,
    /// dirty checksum chunks, the directory) to pages the last durable checkpoint does
    /// not use, as they are encoded: runs of consecutive pages go in one write of at
    /// most [`RUN`] bytes, so the memory a checkpoint takes does not grow with the tree.
    /// Returns the new page of every node and chunk, the directory's pages, and the
    /// file's page count.
    #[allow(clippy::type_complexity)]
    fn write_pages(
        &mut self,
        seq: u64,
        tree: &FlexTree,
        table: &CrcTable,
        durable: &BTreeSet<u64>,
    ) -> Result<(HashMap<NodeId, u64>, Vec<u64>, Vec<u64>, u64)> {
        // Refused before anything is written.
        if table.chunks().div_ceil(PER_DIRECTORY) > MAX_DIRECTORY {
            return Err(crate::Error::NoSpace(
                "the data-checksum directory outgrew the tree file header".into(),
            ));
        }
        let mut free = (2..self.pages).filter(|p| !durable.contains(p));
        let mut fresh = self.pages;
        let mut next_page = || {
            free.next().unwrap_or_else(|| {
                fresh += 1;
                fresh - 1
            })
        };
        let mut out = PageWriter {
            file: &*self.file,
            run: Vec::new(),
            first: 0,
            written: &mut self.bytes_written,
        };
        let mut new_page_of = HashMap::new();
        let mut rewritten = BTreeSet::new();
        for id in tree.post_order() {
            let old = self.page_of.get(&id).copied();
            let child_moved = tree.children_of(id).iter().any(|c| rewritten.contains(c));
            let page = match old {
                Some(p) if !tree.is_dirty(id) && !child_moved => p,
                _ => {
                    let page = next_page();
                    let image = tree.image(id, |c| new_page_of[&c]);
                    out.put(page, &encode_node(&image, seq))?;
                    rewritten.insert(id);
                    page
                }
            };
            new_page_of.insert(id, page);
        }
        let mut chunk_page = self.chunk_page.clone();
        chunk_page.resize(table.chunks(), 0);
        for (c, page) in chunk_page.iter_mut().enumerate() {
            if *page == 0 || table.is_dirty(c) {
                *page = next_page();
                let words: Vec<u64> = table
                    .chunk(c)
                    .iter()
                    .map(|s| u64::from(s.fill) | (u64::from(s.crc) << 32))
                    .collect();
                out.put(*page, &encode_words(CHUNK_KIND, &words, seq))?;
            }
        }
        let mut directory = Vec::new();
        for refs in chunk_page.chunks(PER_DIRECTORY) {
            let page = next_page();
            out.put(page, &encode_words(DIRECTORY_KIND, refs, seq))?;
            directory.push(page);
        }
        out.flush()?;
        Ok((new_page_of, chunk_page, directory, fresh))
    }

    /// Makes the pages written durable, then the header that points at them.
    fn finish_checkpoint(
        &mut self,
        seq: u64,
        tree: &FlexTree,
        page_of: &HashMap<NodeId, u64>,
        chunk_page: &[u64],
        directory: Vec<u64>,
        pages: u64,
    ) -> Result<()> {
        let mut new_durable: BTreeSet<u64> = page_of.values().copied().collect();
        new_durable.extend(chunk_page.iter().copied());
        new_durable.extend(directory.iter().copied());
        let header = Header {
            seq,
            root: page_of[&tree.root()],
            leaf_capacity: tree.options().leaf_capacity as u32,
            internal_capacity: tree.options().internal_capacity as u32,
            len: tree.len(),
            extents: tree.extent_count(),
            pages,
            chunks: chunk_page.len() as u64,
            directory,
        };
        self.file.sync()?;
        self.file
            .write_at(&header.encode(), (seq % 2) * PAGE as u64)?;
        self.file.sync()?;
        self.bytes_written += PAGE as u64;
        self.durable = new_durable;
        Ok(())
    }
}

/// The most bytes of consecutive pages a checkpoint gathers into one write.
const RUN: usize = 1 << 20;

/// A checkpoint's page writes: consecutive pages gathered into runs of up to [`RUN`]
/// bytes, each run written once it ends.
struct PageWriter<'f> {
    file: &'f dyn VfsFile,
    run: Vec<u8>,
    /// The page the run starts at.
    first: u64,
    /// The tree file's count of bytes written, kept up to date run by run (so a
    /// checkpoint that fails part way still counts what it wrote).
    written: &'f mut u64,
}

impl PageWriter<'_> {
    fn put(&mut self, page: u64, bytes: &[u8]) -> Result<()> {
        let next = self.first + (self.run.len() / PAGE) as u64;
        if !self.run.is_empty() && (page != next || self.run.len() >= RUN) {
            self.flush()?;
        }
        if self.run.is_empty() {
            self.first = page;
        }
        self.run.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.run.is_empty() {
            self.file.write_at(&self.run, self.first * PAGE as u64)?;
            *self.written += self.run.len() as u64;
            self.run.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, FaultVfs, OpenMode, Vfs};
    use std::path::{Path, PathBuf};

    fn opts() -> FlexTreeOptions {
        FlexTreeOptions {
            leaf_capacity: 4,
            internal_capacity: 6,
        }
    }

    fn path() -> PathBuf {
        PathBuf::from("/s/tree")
    }

    fn open(vfs: &FaultVfs) -> (TreeFile, FlexTree) {
        vfs.create_dir_all(Path::new("/s")).unwrap();
        let f = vfs.open(&path(), OpenMode::Create).unwrap();
        vfs.sync_dir(Path::new("/s")).unwrap();
        let (tf, t, _) = TreeFile::open(f, opts()).unwrap();
        (tf, t)
    }

    fn ck(tf: &mut TreeFile, t: &mut FlexTree) -> Result<u64> {
        tf.checkpoint(t, &mut CrcTable::default())
    }

    fn fill(t: &mut FlexTree, n: u64) {
        for i in 0..n {
            t.insert((i * 13) % (t.len() + 1), 1 + i % 5, i * 10)
                .unwrap();
        }
    }

    fn extents(t: &FlexTree) -> Vec<crate::flextree::Extent> {
        t.extents().collect()
    }

    #[test]
    fn checkpoints_reload_exactly_and_rewrite_only_the_changed_path() {
        let vfs = FaultVfs::new(1);
        let (mut tf, mut t) = open(&vfs);
        fill(&mut t, 400);
        t.set_tag(50, 9).unwrap();
        ck(&mut tf, &mut t).unwrap();
        let (_, back) = open(&vfs);
        assert_eq!(extents(&back), extents(&t));
        // One insert dirties one leaf and the pivots of its ancestors: O(height) pages.
        let before = vfs.op_count();
        t.insert(t.len(), 1, 1).unwrap();
        ck(&mut tf, &mut t).unwrap();
        let writes = vfs.op_count() - before - 3; // minus two syncs and the header
        assert!(
            writes as usize <= t.height() + 1,
            "{writes} pages for one append"
        );
    }

    #[test]
    fn a_checkpoint_never_writes_over_pages_the_durable_one_uses() {
        let vfs = FaultVfs::new(2);
        let (mut tf, mut t) = open(&vfs);
        for round in 0..20u64 {
            fill(&mut t, 60);
            t.collapse(t.len() / 3, t.len() / 4).unwrap();
            let durable = tf.durable.clone();
            let old = vfs.contents(&path()).unwrap();
            ck(&mut tf, &mut t).unwrap();
            let new = vfs.contents(&path()).unwrap();
            for &p in &durable {
                let r = p as usize * PAGE..(p as usize + 1) * PAGE;
                assert_eq!(
                    old[r.clone()],
                    new[r],
                    "round {round}: durable page {p} overwritten"
                );
            }
        }
        let (_, back) = open(&vfs);
        assert_eq!(extents(&back), extents(&t));
    }

    /// Regression (authors' code): an emptied leaf recycled, checkpointed, reopened.
    #[test]
    fn an_emptied_and_recycled_leaf_survives_checkpoint_and_reopen() {
        let vfs = FaultVfs::new(3);
        let (mut tf, mut t) = open(&vfs);
        fill(&mut t, 200);
        ck(&mut tf, &mut t).unwrap();
        // Empty whole leaves (they merge away and their ids are reused by new splits).
        t.collapse(0, t.len() / 2).unwrap();
        fill(&mut t, 100);
        ck(&mut tf, &mut t).unwrap();
        let (mut tf2, mut back) = open(&vfs);
        assert_eq!(extents(&back), extents(&t));
        back.collapse(0, back.len()).unwrap();
        ck(&mut tf2, &mut back).unwrap();
        let (_, empty) = open(&vfs);
        assert!(empty.is_empty());
    }

    /// Regression (authors' code): a crash after a checkpoint's node writes, before its
    /// header, must leave the previous checkpoint.
    #[test]
    fn a_crash_between_node_writes_and_header_keeps_the_previous_tree() {
        // The same deterministic workload, twice: once to count the checkpoint's
        // operations (k writes of runs of pages, sync, header, sync), once to fail its
        // first sync.
        let setup = || {
            let vfs = FaultVfs::new(4);
            let (mut tf, mut t) = open(&vfs);
            fill(&mut t, 150);
            ck(&mut tf, &mut t).unwrap();
            let saved = extents(&t);
            fill(&mut t, 150);
            (vfs, tf, t, saved)
        };
        let (vfs, mut tf, mut t, _) = setup();
        let (before, bytes) = (vfs.op_count(), tf.bytes_written);
        ck(&mut tf, &mut t).unwrap();
        let page_writes = vfs.op_count() - before - 3;
        assert!(page_writes >= 1);
        assert!(
            tf.bytes_written - bytes > 4 * PAGE as u64,
            "several pages, header aside"
        );
        for mode in CrashMode::CONCRETE {
            let (vfs, mut tf, mut t, saved) = setup();
            vfs.fail_after(page_writes + 1);
            assert!(ck(&mut tf, &mut t).is_err());
            vfs.crash(mode);
            let (_, back) = open(&vfs);
            assert_eq!(extents(&back), saved, "{mode:?}");
        }
    }

    #[test]
    fn consecutive_pages_go_in_one_write_up_to_a_run() {
        let vfs = FaultVfs::new(6);
        let (tf, _) = open(&vfs);
        let page = |b: u8| vec![b; PAGE];
        let before = vfs.op_count();
        let mut written = 0;
        let mut out = PageWriter {
            file: &*tf.file,
            run: Vec::new(),
            first: 0,
            written: &mut written,
        };
        // 5, 6, 7 are one run; 9 is another; then a full run from 11, and one page more.
        for (p, b) in [(5, 1), (6, 2), (7, 3), (9, 4)] {
            out.put(p, &page(b)).unwrap();
        }
        let per_run = (RUN / PAGE) as u64;
        for p in 11..11 + per_run + 1 {
            out.put(p, &page(p as u8)).unwrap();
        }
        out.flush().unwrap();
        assert_eq!(
            vfs.op_count() - before,
            4,
            "writes: 5-7, 9, a full run, the rest"
        );
        drop(out);
        assert_eq!(written, (4 + per_run + 1) * PAGE as u64);
        let bytes = vfs.contents(&path()).unwrap();
        let at = |p: usize| bytes[p * PAGE..(p + 1) * PAGE].to_vec();
        assert_eq!(at(5), page(1));
        assert_eq!(at(7), page(3));
        assert_eq!(at(8), vec![0; PAGE], "a page not written stays as it was");
        assert_eq!(at(9), page(4));
        assert_eq!(at(10), vec![0; PAGE]);
        let last = 11 + per_run as usize;
        assert_eq!(at(last), page(last as u8));
    }

    #[test]
    fn damage_is_corruption_or_the_previous_checkpoint() {
        let vfs = FaultVfs::new(5);
        let (mut tf, mut t) = open(&vfs);
        fill(&mut t, 100);
        ck(&mut tf, &mut t).unwrap();
        let first = extents(&t);
        fill(&mut t, 100);
        ck(&mut tf, &mut t).unwrap();
        let good = vfs.contents(&path()).unwrap();
        // The newest header damaged: the older checkpoint is used.
        let mut bytes = good.clone();
        bytes[(tf.seq() % 2) as usize * PAGE + 20] ^= 0x40;
        vfs.set_contents(&path(), bytes).unwrap();
        assert_eq!(extents(&open(&vfs).1), first);
        // A node page damaged: Corruption, never a wrong tree.
        let mut bytes = good.clone();
        bytes[2 * PAGE + 30] ^= 1;
        vfs.set_contents(&path(), bytes).unwrap();
        let f = vfs.open(&path(), OpenMode::Existing).unwrap();
        match TreeFile::open(f, opts()) {
            Err(Error::Corruption { .. }) => {}
            Ok((_, t2, _)) => assert!(extents(&t2) == extents(&t) || extents(&t2) == first),
            Err(other) => panic!("{other}"),
        }
        // Truncated to nothing valid: Corruption.
        vfs.set_contents(&path(), good[..PAGE + 10].to_vec())
            .unwrap();
        let f = vfs.open(&path(), OpenMode::Existing).unwrap();
        assert!(matches!(
            TreeFile::open(f, opts()),
            Err(Error::Corruption { .. })
        ));
    }
}
