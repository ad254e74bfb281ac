//! The sorted keyspace (FlexDB §5), built up in parts. So far: the volatile sparse
//! index ([`SparseIndex`]) that maps keys to intervals of the keyspace's FlexSpace.

mod index;

pub use index::{Interval, SparseIndex};
