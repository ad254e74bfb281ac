//! flexkv's benchmark harness as a library: the side-by-side comparison with other
//! engines ([`compare`]), shared by the `flexkv-bench` binary and `flexkv bench`.

pub mod compare;
