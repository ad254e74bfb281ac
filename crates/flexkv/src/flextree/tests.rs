//! Unit tests of FlexTree, with the paper's Figures 3–8 as worked examples.
//!
//! The figures themselves are lost from the text; the trees below are rebuilt from what
//! the text says of them (Figure 4's leaf entries, Figure 6's path, pivots and query
//! answer, Figure 7's removal, Figure 5's pivot 38 = 5 + 33). Values the text does not
//! give (the second leaf, the right subtree past 51) are filled in and marked.

use super::node::{Child, Internal, Leaf, LeafEntry, Node, NodeId, NIL};
use super::*;

/// A tree shape to build node by node: leaves of `(partial offset, length, address)`,
/// internal nodes of `(shift, child)` with their pivots.
enum Spec {
    Leaf(Vec<(u64, u64, u64)>),
    Internal(Vec<u64>, Vec<(u64, Spec)>),
}

fn build(opts: FlexTreeOptions, spec: Spec) -> FlexTree {
    fn go(t: &mut FlexTree, spec: Spec, leaves: &mut Vec<NodeId>) -> (NodeId, usize) {
        match spec {
            Spec::Leaf(entries) => {
                t.extents += entries.len() as u64;
                t.size += entries.iter().map(|e| e.1).sum::<u64>();
                let entries = entries
                    .into_iter()
                    .map(|(p, l, a)| LeafEntry::new(p, l, a, 0))
                    .collect();
                let id = t.alloc(Node::Leaf(Leaf { entries }));
                leaves.push(id);
                (id, 1)
            }
            Spec::Internal(pivots, children) => {
                let mut built = Vec::new();
                let mut height = 0;
                for (shift, child) in children {
                    let (id, h) = go(t, child, leaves);
                    height = h;
                    built.push(Child { id, shift });
                }
                let id = t.alloc(Node::Internal(Internal {
                    pivots,
                    children: built,
                }));
                (id, height + 1)
            }
        }
    }
    let mut t = FlexTree::with_options(opts).unwrap();
    let empty_root = t.root;
    t.take(empty_root);
    t.release(empty_root);
    let mut leaves = Vec::new();
    let (root, height) = go(&mut t, spec, &mut leaves);
    for w in leaves.windows(2) {
        t.next_leaf[w[0] as usize] = w[1];
    }
    t.next_leaf[*leaves.last().unwrap() as usize] = NIL;
    t.root = root;
    t.height = height;
    t.check().unwrap();
    t
}

fn caps(leaf: usize, internal: usize) -> FlexTreeOptions {
    FlexTreeOptions {
        leaf_capacity: leaf,
        internal_capacity: internal,
    }
}

/// The raw content of a leaf: `(partial offset, length, address)` per entry.
fn leaf_entries(t: &FlexTree, id: NodeId) -> Vec<(u64, u64, u64)> {
    t.leaf(id)
        .entries
        .iter()
        .map(|e| (e.poff, e.len, e.addr()))
        .collect()
}

/// The raw content of an internal node: its pivots and its children's shifts.
fn internal_parts(t: &FlexTree, id: NodeId) -> (Vec<u64>, Vec<i64>) {
    let n = t.internal(id);
    let shifts = n.children.iter().map(|c| c.shift as i64).collect();
    (n.pivots.clone(), shifts)
}

fn child(t: &FlexTree, id: NodeId, i: usize) -> NodeId {
    t.internal(id).children[i].id
}

fn run(addr: u64, len: u64) -> Run {
    Run {
        addr: Some(addr),
        len,
    }
}

/// Figure 3(b): two subtrees under the root; the left holds three leaves, the right two.
/// All shifts are 0, so partial offsets equal effective offsets. The second leaf and the
/// right subtree are not described in the text (filled in here).
fn figure_3b() -> FlexTree {
    use Spec::*;
    build(
        caps(8, 8),
        Internal(
            vec![51],
            vec![
                (
                    0,
                    Internal(
                        vec![17, 30],
                        vec![
                            (0, Leaf(vec![(0, 9, 0), (9, 8, 31)])),
                            (0, Leaf(vec![(17, 6, 70), (23, 7, 80)])), // not in the text
                            (0, Leaf(vec![(30, 9, 12), (39, 3, 39), (42, 9, 50)])),
                        ],
                    ),
                ),
                (
                    0,
                    Internal(
                        vec![60],
                        vec![
                            (0, Leaf(vec![(51, 5, 42), (56, 4, 100)])), // 42: Figure 6
                            (0, Leaf(vec![(60, 4, 90), (64, 6, 110)])), // not in the text
                        ],
                    ),
                ),
            ],
        ),
    )
}

#[test]
fn figure_4_insert_shifts_one_pointer_per_level() {
    let mut t = figure_3b();
    t.insert(0, 3, 89).unwrap();
    t.check().unwrap();
    let (root, left) = (t.root, child(&t, t.root, 0));
    assert_eq!(
        leaf_entries(&t, child(&t, left, 0)),
        vec![(0, 3, 89), (3, 9, 0), (12, 8, 31)]
    );
    assert_eq!(internal_parts(&t, left), (vec![20, 33], vec![0, 3, 3]));
    assert_eq!(internal_parts(&t, root), (vec![54], vec![0, 3]));
    // Untouched: the partial offsets of every leaf after the first.
    assert_eq!(
        leaf_entries(&t, child(&t, left, 2)),
        vec![(30, 9, 12), (39, 3, 39), (42, 9, 50)]
    );
    assert_eq!(t.len(), 73);
}

#[test]
fn figure_6_query_walks_the_leaves_from_the_start_point() {
    let mut t = figure_3b();
    t.insert(0, 3, 89).unwrap();
    // The third leaf's path is ((0,+0),(2,+3)): partial 30 is effective 33.
    let third = child(&t, child(&t, t.root, 0), 2);
    assert_eq!(t.leaf(third).entries[0].poff, 30);
    assert_eq!(t.lookup(36).unwrap().offset, 33);
    assert_eq!(
        t.query(36, 19).unwrap(),
        vec![run(15, 6), run(39, 3), run(50, 9), run(42, 1)]
    );
}

#[test]
fn figure_7_collapse_shifts_back_with_a_negative_value() {
    let mut t = figure_3b();
    t.insert(0, 3, 89).unwrap();
    t.collapse(33, 9).unwrap();
    t.check().unwrap();
    let (root, left) = (t.root, child(&t, t.root, 0));
    assert_eq!(
        leaf_entries(&t, child(&t, left, 2)),
        vec![(30, 3, 39), (33, 9, 50)]
    );
    // The pointer to the subtree of the last two leaves moves by -9 (from +3 to -6).
    assert_eq!(internal_parts(&t, root), (vec![45], vec![0, -6]));
    assert_eq!(internal_parts(&t, left), (vec![20, 33], vec![0, 3, 3]));
    assert_eq!(t.lookup(45).unwrap().addr, Some(42));
    assert_eq!(t.len(), 64);
}

#[test]
fn figure_5_split_pivot_is_median_partial_plus_inherited_shift() {
    use Spec::*;
    // The right leaf sits under a pointer with shift 33 and is full (3 of 4 entries).
    let mut t = build(
        caps(4, 6),
        Internal(
            vec![33],
            vec![
                (0, Leaf(vec![(0, 33, 100)])),
                (33, Leaf(vec![(0, 5, 200), (5, 4, 210), (9, 1, 220)])),
            ],
        ),
    );
    t.insert(40, 2, 300).unwrap();
    t.check().unwrap();
    let root = t.root;
    // New pivot 38 = median partial 5 + inherited shift 33; the new pointer inherits 33.
    assert_eq!(internal_parts(&t, root), (vec![33, 38], vec![0, 33, 33]));
    assert_eq!(leaf_entries(&t, child(&t, root, 1)), vec![(0, 5, 200)]);
    assert_eq!(
        leaf_entries(&t, child(&t, root, 2)),
        vec![(5, 2, 210), (7, 2, 300), (9, 2, 212), (11, 1, 220)]
    );
}

#[test]
fn figure_8_merge_folds_the_right_nodes_shift_into_the_survivor() {
    use Spec::*;
    // Two internal nodes under pointers with different shifts (0 and 10).
    let mut t = build(
        caps(4, 8),
        Internal(
            vec![20],
            vec![
                (
                    0,
                    Internal(
                        vec![10],
                        vec![
                            (0, Leaf(vec![(0, 10, 100)])),
                            (0, Leaf(vec![(10, 10, 200)])),
                        ],
                    ),
                ),
                (
                    10,
                    Internal(
                        vec![15],
                        vec![(0, Leaf(vec![(10, 5, 300)])), (5, Leaf(vec![(10, 5, 400)]))],
                    ),
                ),
            ],
        ),
    );
    // Emptying the third leaf leaves the right internal node with one child: it merges
    // into the left one, and the root, left with one child, is dropped.
    t.collapse(20, 5).unwrap();
    t.check().unwrap();
    assert_eq!(t.height(), 2);
    let (pivots, shifts) = internal_parts(&t, t.root);
    assert_eq!(pivots, vec![10, 20]);
    assert_eq!(
        shifts,
        vec![0, 0, 10],
        "the right node's shift 10 is folded in"
    );
    assert_eq!(
        t.extents()
            .map(|e| (e.offset, e.len, e.addr))
            .collect::<Vec<_>>(),
        vec![(0, 10, Some(100)), (10, 10, Some(200)), (20, 5, Some(400))]
    );
}

#[test]
fn inserts_split_extents_and_shift_everything_after() {
    let mut t = FlexTree::with_options(caps(4, 6)).unwrap();
    t.insert(0, 10, 1000).unwrap();
    t.insert(10, 10, 2000).unwrap(); // append
    t.insert(0, 5, 3000).unwrap(); // front
    t.insert(8, 4, 4000).unwrap(); // inside the first data extent
    t.check().unwrap();
    assert_eq!(
        t.query(0, t.len()).unwrap(),
        vec![
            run(3000, 5),
            run(1000, 3),
            run(4000, 4),
            run(1003, 7),
            run(2000, 10)
        ]
    );
    assert_eq!(t.extent_count(), 5);
    assert!(t.height() >= 2, "four-entry leaves must have split");
}

#[test]
fn many_inserts_and_collapses_grow_and_shrink_the_tree() {
    let mut t = FlexTree::with_options(caps(4, 6)).unwrap();
    for i in 0..500u64 {
        t.insert((i * 7) % (t.len() + 1), 3, i * 10).unwrap();
        t.check().unwrap();
    }
    assert!(t.height() >= 4);
    while !t.is_empty() {
        let len = t.len().min(11);
        t.collapse((t.len() / 3).min(t.len() - len), len).unwrap();
        t.check().unwrap();
    }
    assert_eq!((t.height(), t.extent_count()), (1, 0));
    t.insert(0, 1, 1).unwrap();
    t.check().unwrap();
}

#[test]
fn collapse_of_everything_at_once_leaves_an_empty_tree() {
    let mut t = FlexTree::with_options(caps(4, 6)).unwrap();
    for i in 0..200 {
        t.insert(t.len(), 5, i * 5 + 1).unwrap();
    }
    t.collapse(0, t.len()).unwrap();
    t.check().unwrap();
    assert!(t.is_empty());
    assert_eq!(t.height(), 1);
}

#[test]
fn overwrite_past_the_end_inserts_a_hole() {
    let mut t = FlexTree::new();
    t.overwrite(100, 10, Some(7000)).unwrap();
    assert_eq!(t.len(), 110);
    assert_eq!(
        t.query(90, 20).unwrap(),
        vec![
            Run {
                addr: None,
                len: 10
            },
            run(7000, 10)
        ]
    );
    // Overwrite the middle of the hole and across its end.
    t.overwrite(50, 55, Some(8000)).unwrap();
    assert_eq!(
        t.query(0, 110).unwrap(),
        vec![
            Run {
                addr: None,
                len: 50
            },
            run(8000, 55),
            run(7005, 5)
        ]
    );
    t.overwrite(0, 10, None).unwrap();
    assert_eq!(t.lookup(3).unwrap().addr, None);
    t.check().unwrap();
}

#[test]
fn remap_moves_a_contiguous_range_and_refuses_a_stale_one() {
    let mut t = FlexTree::new();
    t.insert(0, 10, 100).unwrap();
    t.insert(10, 10, 110).unwrap(); // physically contiguous with the first
    t.insert(20, 10, 500).unwrap();
    t.set_tag(0, 9).unwrap();
    // Across two entries that are contiguous on disk: allowed.
    t.remap(5, 10, 105, 900).unwrap();
    assert_eq!(
        t.query(0, 30).unwrap(),
        vec![
            run(100, 5),
            run(900, 5),
            run(905, 5),
            run(115, 5),
            run(500, 10)
        ]
    );
    assert_eq!(t.tag_at(0), Some(9), "a remap keeps tags");
    // Stale: the range is not stored at the claimed address. Nothing changes.
    let before: Vec<Extent> = t.extents().collect();
    assert!(matches!(
        t.remap(0, 10, 100, 2000),
        Err(Error::InvalidArgument(_))
    ));
    assert!(t.remap(25, 10, 505, 2000).is_err(), "past the end");
    assert_eq!(t.extents().collect::<Vec<_>>(), before);
    t.insert_hole(30, 5).unwrap();
    assert!(
        t.remap(30, 5, 0, 2000).is_err(),
        "a hole is not stored anywhere"
    );
    t.check().unwrap();
}

#[test]
fn tags_stay_with_their_extent_and_split_tails_are_untagged() {
    let mut t = FlexTree::new();
    t.insert(0, 100, 1000).unwrap();
    t.set_tag(40, 7).unwrap(); // splits at 40
    assert_eq!(t.tag_at(40), Some(7));
    assert_eq!(t.tag_at(0), Some(0));
    assert_eq!(t.tag_at(41), None, "no extent starts at 41");
    t.insert(10, 5, 5000).unwrap();
    assert_eq!(t.tag_at(45), Some(7), "shifted with its extent");
    t.set_tag(60, 1).unwrap();
    assert_eq!(t.tag_at(45), Some(7));
    assert_eq!(t.lookup(50).unwrap().tag, 7);
    t.collapse(45, 15).unwrap();
    assert_eq!(
        t.tag_at(45),
        Some(1),
        "the tagged extent went, the next one came"
    );
    assert!(t.set_tag(t.len(), 1).is_err());
    t.check().unwrap();
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let mut t = FlexTree::new();
    t.insert(0, 10, 0).unwrap();
    let before: Vec<Extent> = t.extents().collect();
    let refused = [
        t.insert(11, 1, 0),
        t.insert(0, 1, HOLE),
        t.insert(0, 2, HOLE - 1),
        t.insert(0, u64::MAX, 0),
        t.insert(0, MAX_LEN, 0),
        t.insert_hole(0, MAX_LEN - 9),
        t.collapse(5, 6),
        t.collapse(u64::MAX, 2),
        t.overwrite(MAX_LEN, 1, Some(0)),
        t.overwrite(u64::MAX, 2, None),
        t.set_tag(10, 1),
        t.query(0, 11).map(|_| ()),
        t.query(u64::MAX, 1).map(|_| ()),
    ];
    for (i, r) in refused.into_iter().enumerate() {
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "case {i}: {r:?}"
        );
    }
    assert_eq!(t.extents().collect::<Vec<_>>(), before);
    assert!(FlexTree::with_options(caps(3, 6)).is_err());
    assert!(FlexTree::with_options(caps(4, 5)).is_err());
    // Zero-length changes are accepted no-ops.
    t.insert(3, 0, 0).unwrap();
    t.collapse(3, 0).unwrap();
    assert_eq!(t.extents().collect::<Vec<_>>(), before);
}

#[test]
fn offsets_near_the_limit_stay_exact_through_wrapping_shifts() {
    let mut t = FlexTree::with_options(caps(4, 6)).unwrap();
    let big = MAX_LEN / 4;
    t.insert_hole(0, big).unwrap();
    for i in 0..60u64 {
        t.insert((big / 60) * i, 1 + i, i * 100).unwrap();
        t.insert_hole(t.len() / 2, big / 64).unwrap();
    }
    for _ in 0..30 {
        // Collapses of huge ranges push shifts far negative (wrapping).
        t.collapse(t.len() / 3, big / 40).unwrap();
        t.check().unwrap();
    }
    t.insert_hole(0, MAX_LEN - t.len()).unwrap();
    assert_eq!(t.len(), MAX_LEN);
    t.check().unwrap();
    let last = t.extents().last().unwrap();
    assert_eq!(last.offset + last.len, MAX_LEN);
}

#[test]
fn dirty_flags_cover_every_changed_node_and_freed_ids_are_reported() {
    let mut t = FlexTree::with_options(caps(4, 6)).unwrap();
    for i in 0..100 {
        t.insert(t.len(), 1, i).unwrap();
    }
    t.clear_dirty();
    t.take_freed();
    assert!(t.dirty_nodes().is_empty());
    // An insert at the front changes the first leaf and every ancestor on its path.
    t.insert(0, 1, 777).unwrap();
    let dirty = t.dirty_nodes();
    let mut id = t.root;
    while !t.is_leaf(id) {
        assert!(dirty.contains(&id), "ancestor {id} changed but is clean");
        id = child(&t, id, 0);
    }
    assert!(dirty.contains(&id));
    assert!(
        dirty.len() <= t.height() + 2,
        "O(height) nodes, got {dirty:?}"
    );
    // Collapsing everything frees nodes, and says which.
    t.clear_dirty();
    t.collapse(0, t.len()).unwrap();
    let freed = t.take_freed();
    assert!(freed.len() > 10);
    assert!(freed
        .iter()
        .all(|&id| matches!(t.nodes[id as usize], Node::Free)));
}
