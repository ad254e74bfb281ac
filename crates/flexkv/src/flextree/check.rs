//! The FlexTree invariant checker, run by every test after every operation.
//!
//! It verifies, in one walk:
//! - effective offsets are contiguous: every entry starts where the previous one ended,
//!   computed from partial offsets and path shifts (not from lengths), and the last ends
//!   at `len()`; so every node's first entry is at partial offset 0;
//! - pivots agree with children: child `i` covers exactly `[start_i, start_{i+1})`, the
//!   starts strictly increase, so no child is empty;
//! - fill bounds: no node above capacity, no non-root node below its minimum, an internal
//!   root has at least two children; all leaves at one depth;
//! - entries: non-zero lengths, data addresses that do not run into the hole address;
//! - bookkeeping: the leaf chain visits the leaves in order, every live node is reachable
//!   exactly once, the free list is exactly the free slots, the counters are right.

use super::node::{Node, NodeId, NIL};
use super::{FlexTree, HOLE};

struct Walk {
    leaves: Vec<NodeId>,
    seen: Vec<bool>,
    extents: u64,
}

impl FlexTree {
    /// Checks every structural invariant; `Err` describes the first violation found.
    /// Costs O(number of extents).
    pub fn check(&self) -> Result<(), String> {
        let mut walk = Walk {
            leaves: Vec::new(),
            seen: vec![false; self.nodes.len()],
            extents: 0,
        };
        let height = self.check_node(self.root, 0, self.size, true, &mut walk)?;
        if height != self.height {
            return Err(format!("height is {height}, recorded {}", self.height));
        }
        if walk.extents != self.extents {
            return Err(format!(
                "{} extents found, {} counted",
                walk.extents, self.extents
            ));
        }
        let mut chain = Vec::new();
        let mut leaf = walk.leaves[0];
        while leaf != NIL && chain.len() <= walk.leaves.len() {
            chain.push(leaf);
            leaf = self.next_leaf[leaf as usize];
        }
        if chain != walk.leaves {
            return Err(format!(
                "leaf chain {chain:?} differs from tree order {:?}",
                walk.leaves
            ));
        }
        for (id, node) in self.nodes.iter().enumerate() {
            let free = matches!(node, Node::Free);
            if free == walk.seen[id] {
                return Err(format!("node {id}: free={free} but reachable={}", !free));
            }
        }
        let mut free = self.free.clone();
        free.sort_unstable();
        free.dedup();
        let free_slots = self
            .nodes
            .iter()
            .filter(|n| matches!(n, Node::Free))
            .count();
        if free.len() != self.free.len() || free.len() != free_slots {
            return Err(format!(
                "free list has {} ids ({} distinct) for {free_slots} free slots",
                self.free.len(),
                free.len()
            ));
        }
        Ok(())
    }

    /// Checks the subtree `id` against the range `[lo, hi)` its parent assigns it (so `lo`
    /// is also its frame: the sum of the shifts on its path); returns its height.
    fn check_node(
        &self,
        id: NodeId,
        lo: u64,
        hi: u64,
        is_root: bool,
        walk: &mut Walk,
    ) -> Result<usize, String> {
        if std::mem::replace(&mut walk.seen[id as usize], true) {
            return Err(format!("node {id} is reachable twice"));
        }
        let fill = self.fill(id);
        if fill > self.capacity(id) {
            return Err(format!("node {id} holds {fill}, over capacity"));
        }
        if !is_root && fill < self.min_fill(id) {
            return Err(format!("node {id} holds {fill}, under the minimum"));
        }
        match &self.nodes[id as usize] {
            Node::Leaf(leaf) => {
                let mut at = lo;
                for (i, e) in leaf.entries().enumerate() {
                    let start = lo.checked_add(e.poff);
                    if start != Some(at) {
                        return Err(format!(
                            "leaf {id} entry {i}: effective offset {start:?}, expected {at}"
                        ));
                    }
                    if e.len == 0 {
                        return Err(format!("leaf {id} entry {i} is empty"));
                    }
                    if !e.is_hole() && e.addr().checked_add(e.len).is_none_or(|end| end > HOLE) {
                        return Err(format!("leaf {id} entry {i} runs into the hole address"));
                    }
                    at += e.len;
                }
                if at != hi {
                    return Err(format!("leaf {id} ends at {at}, its parent says {hi}"));
                }
                walk.leaves.push(id);
                if leaf.span() != at - lo {
                    return Err(format!("leaf {id} says it is {} bytes long", leaf.span()));
                }
                walk.extents += leaf.len() as u64;
                Ok(1)
            }
            Node::Internal(node) => {
                if is_root && node.children.len() < 2 {
                    return Err(format!("internal root {id} has one child"));
                }
                if node.pivots.len() + 1 != node.children.len() {
                    return Err(format!("node {id}: pivots and children disagree"));
                }
                let mut starts = vec![lo];
                starts.extend(node.pivots.iter().map(|p| lo.saturating_add(*p)));
                starts.push(hi);
                if starts.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(format!(
                        "node {id}: child ranges not increasing: {starts:?}"
                    ));
                }
                let mut height = None;
                for (i, &c) in node.children.iter().enumerate() {
                    let h = self.check_node(c, starts[i], starts[i + 1], false, walk)?;
                    if *height.get_or_insert(h) != h {
                        return Err(format!("node {id}: leaves at different depths"));
                    }
                }
                Ok(height.unwrap_or(0) + 1)
            }
            Node::Free => Err(format!("node {id} is reachable but free")),
        }
    }
}
