//! The sorted keyspace (FlexDB §5 on FlexSpace §4, with SkimpyFTL's version history):
//! records kept in key order in a FlexSpace per keyspace ([`Record`]), a volatile sparse
//! index over intervals of them ([`SparseIndex`]), an interval cache, the committer that
//! applies frozen memtables in place, and recovery from the interval heads' tags.

mod cache;
pub(crate) mod commit;
mod doorkeeper;
pub(crate) mod history;
pub(crate) mod index;
pub(crate) mod interval;
mod misses;
mod record;
mod rows;
pub(crate) mod store;
mod view;

pub use index::{Interval, SparseIndex};
pub use record::{Record, RecordValue};
