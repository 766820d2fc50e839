//! isnode-wire (work in progress).
