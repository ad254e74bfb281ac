//! Node images: a FlexTree's nodes as plain values, so that `space` can write them
//! copy-on-write to the FlexTree file and build the tree back from it.
//!
//! The tree does not know how children are referred to on disk: an image's child
//! references are whatever the caller maps node ids to (page numbers), and loading asks
//! the caller for the image behind each reference. A loaded tree is checked in full, and
//! a tree that fails [`FlexTree::check`] is refused as corruption of its file.

use super::node::{Internal, Leaf, LeafEntry, Node, NodeId, NIL};
use super::{FlexTree, FlexTreeOptions};

/// One leaf entry in an image: partial offset, length, physical address, tag.
pub(crate) type EntryImage = (u64, u64, u64, u8);

/// A node's persistent content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeImage {
    Leaf(Vec<EntryImage>),
    /// Pivots (the shifts of children 1..) and the caller's references to the children.
    Internal {
        pivots: Vec<u64>,
        children: Vec<u64>,
    },
}

impl FlexTree {
    /// Every live node, children before their parents (the order a copy-on-write
    /// checkpoint writes them in, so a parent can refer to its children's new places).
    pub(crate) fn post_order(&self) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut stack = vec![(self.root, false)];
        while let Some((id, expanded)) = stack.pop() {
            match &self.nodes[id as usize] {
                Node::Internal(n) if !expanded => {
                    stack.push((id, true));
                    stack.extend(n.children.iter().rev().map(|&c| (c, false)));
                }
                _ => out.push(id),
            }
        }
        out
    }

    /// The children of node `id` (none for a leaf).
    pub(crate) fn children_of(&self, id: NodeId) -> &[NodeId] {
        match &self.nodes[id as usize] {
            Node::Internal(n) => &n.children,
            _ => &[],
        }
    }

    /// Whether node `id` changed since the last [`FlexTree::clear_dirty`].
    pub(crate) fn is_dirty(&self, id: NodeId) -> bool {
        self.dirty[id as usize]
    }

    /// The image of node `id`, with each child referred to by `child_ref(child id)`.
    pub(crate) fn image(&self, id: NodeId, child_ref: impl Fn(NodeId) -> u64) -> NodeImage {
        match &self.nodes[id as usize] {
            Node::Leaf(l) => NodeImage::Leaf(
                l.entries()
                    .map(|e| (e.poff, e.len, e.addr(), e.tag()))
                    .collect(),
            ),
            Node::Internal(n) => NodeImage::Internal {
                pivots: n.pivots.clone(),
                children: n.children.iter().map(|&c| child_ref(c)).collect(),
            },
            Node::Free => panic!("image of a free node {id}"),
        }
    }

    /// Builds a tree from the image behind `root`, asking `load` for the image behind
    /// every reference (and reporting each node's new id to `placed`). The result is clean
    /// (nothing dirty) and fully checked; a malformed image is an `Err` with what failed.
    pub(crate) fn from_images<E>(
        opts: FlexTreeOptions,
        root: u64,
        mut load: impl FnMut(u64) -> Result<NodeImage, E>,
        mut placed: impl FnMut(u64, NodeId),
        malformed: impl Fn(String) -> E,
    ) -> Result<FlexTree, E> {
        let mut t = FlexTree::with_options(opts).map_err(|e| malformed(e.to_string()))?;
        let empty_root = t.root;
        t.take(empty_root);
        t.release(empty_root);
        t.freed.clear();
        // Depth-first, children in order, so leaves come out in address order.
        let mut leaves = Vec::new();
        let mut depth_of_leaves = None;
        let mut stack = vec![(root, None::<(NodeId, usize)>, 1usize)];
        while let Some((reference, parent, depth)) = stack.pop() {
            if t.nodes.len() > (u32::MAX / 2) as usize {
                return Err(malformed("more nodes than a tree can hold".into()));
            }
            let mut child_refs = Vec::new();
            let node = match load(reference)? {
                NodeImage::Leaf(entries) => {
                    if *depth_of_leaves.get_or_insert(depth) != depth {
                        return Err(malformed("leaves at different depths".into()));
                    }
                    t.extents += entries.len() as u64;
                    t.size = entries
                        .iter()
                        .try_fold(t.size, |s, e| s.checked_add(e.1))
                        .ok_or_else(|| malformed("extent lengths overflow".into()))?;
                    let entries = entries
                        .into_iter()
                        .map(|(p, l, a, tag)| {
                            if a > super::HOLE {
                                Err(malformed(format!("address {a} past the hole address")))
                            } else {
                                Ok(LeafEntry::new(p, l, a, tag))
                            }
                        })
                        .collect::<Result<Vec<_>, E>>()?;
                    Node::Leaf(Leaf::from_entries(&entries).map_err(&malformed)?)
                }
                NodeImage::Internal { pivots, children } => {
                    if children.is_empty() || pivots.len() + 1 != children.len() {
                        return Err(malformed("internal node with mismatched pivots".into()));
                    }
                    // Children are filled in as they load (placeholders until then).
                    child_refs = children.clone();
                    Node::Internal(Internal {
                        pivots,
                        children: vec![NIL; children.len()],
                    })
                }
            };
            let is_leaf = matches!(node, Node::Leaf(_));
            let id = t.alloc(node);
            placed(reference, id);
            for (i, &c) in child_refs.iter().enumerate().rev() {
                stack.push((c, Some((id, i)), depth + 1));
            }
            if is_leaf {
                leaves.push(id);
            }
            match parent {
                Some((p, i)) => t.internal_mut(p).children[i] = id,
                None => t.root = id,
            }
        }
        for w in leaves.windows(2) {
            t.next_leaf[w[0] as usize] = w[1];
        }
        t.height = depth_of_leaves.unwrap_or(1);
        t.clear_dirty();
        t.check().map_err(malformed)?;
        Ok(t)
    }
}
