//! isnode-bench (work in progress).
