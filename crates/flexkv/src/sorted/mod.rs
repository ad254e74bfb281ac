//! The sorted keyspace (FlexDB §5), built up in parts. So far: the volatile sparse
//! index ([`SparseIndex`]) that maps keys to intervals of the keyspace's FlexSpace, and
//! the [`Record`] format those intervals will hold.

mod index;
mod record;

pub use index::{Interval, SparseIndex};
pub use record::{Record, RecordValue};
