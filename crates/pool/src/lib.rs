//! Disk to memory, the one copy: the pool of block buffers every session shares
//! ([`cache`]), the reads that fill it ([`reader`]: io_uring `READ_FIXED` or `pread`), the
//! served objects and their segment files ([`objects`], with a filling object's readable
//! front in [`front`]), where the data plane's sessions are ([`demand`]: next use, for
//! eviction), and the members' health from their reads ([`members`]). No tokio here: the
//! data plane calls it from its own threads, the API from blocking ones.

pub mod cache;
pub mod demand;
pub mod front;
pub mod members;
pub mod objects;
pub mod reader;
pub mod uring_probe;
