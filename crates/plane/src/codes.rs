//! The Reed-Solomon codes a thread builds packets with (rebuilds, the baseline engine's
//! parity), one per source-symbol count, made on first use.

use std::collections::HashMap;

use isnode_fec::Code;

/// The code for k source symbols of n (cached per thread).
pub(crate) fn code_for(codes: &mut HashMap<u32, Code>, k: u32, n: u32) -> Option<&Code> {
    if let std::collections::hash_map::Entry::Vacant(v) = codes.entry(k) {
        match Code::new(k as usize, n as usize) {
            Ok(c) => {
                v.insert(c);
            }
            Err(err) => {
                tracing::error!("no code for k={k} n={n}: {err}");
                return None;
            }
        }
    }
    codes.get(&k)
}
