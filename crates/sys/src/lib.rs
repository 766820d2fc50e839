//! isnode's system calls and time, apart from every decision: the UDP send calls of the
//! engines (GSO `sendmsg`, `sendmmsg`, `sendto`, multicast options), the events threads
//! sleep on (`eventfd`, `ppoll`), the server's clock and its stop signal, the priority of
//! background work (`nice`, `ioprio_set`). It knows no
//! isnode type; everything above it passes values in.

pub mod clock;
pub mod event;
pub mod fds;
pub mod fileview;
pub mod memory;
pub mod net;
pub mod priority;
pub mod stop;
