//! isnode-fec (work in progress).
