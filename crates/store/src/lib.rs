//! isnode-store (work in progress).
