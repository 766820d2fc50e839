//! isnode's system calls, apart from every decision: the UDP send calls of the engines
//! (GSO `sendmsg`, `sendmmsg`, `sendto`, multicast options) and the events threads sleep
//! on (`eventfd`, `ppoll`). It knows no isnode type; everything above it passes values in.

pub mod event;
pub mod net;
