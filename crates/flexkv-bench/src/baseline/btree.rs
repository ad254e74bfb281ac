//! A B+-tree over extents with FlexTree's node layout but no shift values (FlexTree §6.1,
//! Figure 3(a)): entries hold absolute offsets, so an insert rewrites the offset of every
//! later extent and every later pivot. Same capacities, same early split rule.

use super::ExtentIndex;

#[derive(Clone, Copy)]
struct Entry {
    off: u64,
    len: u64,
    addr: u64,
}

enum Node {
    Leaf(Vec<Entry>),
    Internal {
        pivots: Vec<u64>,
        children: Vec<u32>,
    },
}

/// The baseline B+-tree.
pub struct BPlusTree {
    nodes: Vec<Node>,
    next: Vec<u32>,
    root: u32,
    size: u64,
    leaf_cap: usize,
    internal_cap: usize,
    path: Vec<(u32, usize)>,
}

const NIL: u32 = u32::MAX;

impl BPlusTree {
    /// An empty tree with FlexTree's capacities.
    pub fn new(leaf_cap: usize, internal_cap: usize) -> Self {
        BPlusTree {
            nodes: vec![Node::Leaf(Vec::new())],
            next: vec![NIL],
            root: 0,
            size: 0,
            leaf_cap,
            internal_cap,
            path: Vec::new(),
        }
    }

    fn is_full(&self, id: u32) -> bool {
        match &self.nodes[id as usize] {
            Node::Leaf(es) => es.len() + 1 >= self.leaf_cap,
            Node::Internal { children, .. } => children.len() + 1 >= self.internal_cap,
        }
    }

    fn child_index(&self, id: u32, off: u64) -> usize {
        match &self.nodes[id as usize] {
            Node::Internal { pivots, .. } => pivots.partition_point(|&p| p <= off),
            Node::Leaf(_) => unreachable!(),
        }
    }

    fn child(&self, id: u32, i: usize) -> u32 {
        match &self.nodes[id as usize] {
            Node::Internal { children, .. } => children[i],
            Node::Leaf(_) => unreachable!(),
        }
    }

    fn split_child(&mut self, parent: u32, idx: usize) {
        let old = self.child(parent, idx);
        let (node, sep) = match &mut self.nodes[old as usize] {
            Node::Leaf(es) => {
                let upper = es.split_off(es.len() / 2);
                let sep = upper[0].off;
                (Node::Leaf(upper), sep)
            }
            Node::Internal { pivots, children } => {
                let mid = children.len() / 2;
                let children = children.split_off(mid);
                let upper = pivots.split_off(mid);
                let sep = pivots.pop().expect("full node has pivots");
                (
                    Node::Internal {
                        pivots: upper,
                        children,
                    },
                    sep,
                )
            }
        };
        let new = self.nodes.len() as u32;
        let is_leaf = matches!(node, Node::Leaf(_));
        self.nodes.push(node);
        self.next.push(NIL);
        if is_leaf {
            self.next[new as usize] = self.next[old as usize];
            self.next[old as usize] = new;
        }
        if let Node::Internal { pivots, children } = &mut self.nodes[parent as usize] {
            children.insert(idx + 1, new);
            pivots.insert(idx, sep);
        }
    }

    /// Adds `delta` to every offset in the subtree: what a shift value saves FlexTree.
    fn shift_subtree(&mut self, id: u32, delta: u64) {
        match &mut self.nodes[id as usize] {
            Node::Leaf(es) => es.iter_mut().for_each(|e| e.off += delta),
            Node::Internal { pivots, children } => {
                pivots.iter_mut().for_each(|p| *p += delta);
                let n = children.len();
                for i in 0..n {
                    let c = self.child(id, i);
                    self.shift_subtree(c, delta);
                }
            }
        }
    }

    fn find_leaf(&self, off: u64) -> u32 {
        let mut id = self.root;
        while let Node::Internal { .. } = self.nodes[id as usize] {
            id = self.child(id, self.child_index(id, off));
        }
        id
    }

    fn leaf(&self, id: u32) -> &[Entry] {
        match &self.nodes[id as usize] {
            Node::Leaf(es) => es,
            Node::Internal { .. } => unreachable!(),
        }
    }
}

impl ExtentIndex for BPlusTree {
    fn size(&self) -> u64 {
        self.size
    }

    fn insert(&mut self, off: u64, len: u64, addr: u64) {
        if self.is_full(self.root) {
            let old = self.root;
            self.root = self.nodes.len() as u32;
            self.nodes.push(Node::Internal {
                pivots: Vec::new(),
                children: vec![old],
            });
            self.next.push(NIL);
            self.split_child(self.root, 0);
        }
        self.path.clear();
        let mut id = self.root;
        while let Node::Internal { .. } = self.nodes[id as usize] {
            let mut idx = self.child_index(id, off);
            if self.is_full(self.child(id, idx)) {
                self.split_child(id, idx);
                idx = self.child_index(id, off);
            }
            self.path.push((id, idx));
            id = self.child(id, idx);
        }
        let Node::Leaf(es) = &mut self.nodes[id as usize] else {
            unreachable!()
        };
        let pos = es.partition_point(|e| e.off < off);
        es.insert(pos, Entry { off, len, addr });
        es[pos + 1..].iter_mut().for_each(|e| e.off += len);
        for i in 0..self.path.len() {
            let (node, idx) = self.path[i];
            let later: Vec<u32> = match &mut self.nodes[node as usize] {
                Node::Internal { pivots, children } => {
                    pivots[idx..].iter_mut().for_each(|p| *p += len);
                    children[idx + 1..].to_vec()
                }
                Node::Leaf(_) => unreachable!(),
            };
            for c in later {
                self.shift_subtree(c, len);
            }
        }
        self.size += len;
    }

    fn lookup(&self, off: u64) -> u64 {
        let es = self.leaf(self.find_leaf(off));
        let e = es[es.partition_point(|e| e.off <= off) - 1];
        e.addr + (off - e.off)
    }

    fn range(&self, off: u64, n: usize) -> u64 {
        let mut id = self.find_leaf(off);
        let es = self.leaf(id);
        let mut pos = es.partition_point(|e| e.off <= off) - 1;
        let (mut acc, mut seen) = (0u64, 0);
        while seen < n && id != NIL {
            let es = self.leaf(id);
            if let Some(e) = es.get(pos) {
                acc = acc.wrapping_add(e.addr ^ e.off).wrapping_add(e.len);
                seen += 1;
                pos += 1;
            } else {
                id = self.next[id as usize];
                pos = 0;
            }
        }
        acc
    }
}
