//! isnode-media (work in progress).
