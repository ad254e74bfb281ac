//! Helpers shared by the integration tests.

use flexkv::space::SpaceOptions;

/// FlexSpace options small enough that a test fills segments, collects them and
/// checkpoints its tree.
pub fn small_space() -> SpaceOptions {
    SpaceOptions {
        segment_size: 64 << 10,
        max_extent: 16 << 10,
        log_capacity: 8 << 10,
        ..SpaceOptions::default()
    }
}
