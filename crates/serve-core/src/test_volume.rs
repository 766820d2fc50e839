//! The small volume of the unit tests.

/// 6 members, k <= 20, m = 4, 1024-byte symbols, 7 packets per 8 KiB block.
pub(crate) fn test_params() -> isnode_layout::VolumeParams {
    isnode_layout::VolumeParams {
        symbol_len: 1024,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 8192,
    }
}
