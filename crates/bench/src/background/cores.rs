//! Where the benchmark's processes run. The clients stand in for players on other
//! machines; on one machine they share its cores with the node, and with a busy core their
//! own stalls made streams invalid while the server was on time (27/32 valid under the busy
//! core, the server's slack above 760 ms, no late burst). [`Cores::Split`] gives the node
//! one core, shared with its background work, the busy load and this benchmark's own
//! threads, and the clients the others: the node is judged on one busy core, the clients
//! are not.

use anyhow::Context;

/// How the benchmark places its processes on the machine's cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Cores {
    /// Everything wherever the kernel runs it.
    Shared,
    /// The node (the server, its scrub, the rebuild), the busy load and the benchmark's
    /// threads on the first core this process may use; the clients on the rest.
    Split,
}

/// The CPUs this process may run on.
fn allowed() -> anyhow::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
    #[allow(unsafe_code)]
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
        }
        set
    };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set within its size.
    #[allow(unsafe_code)]
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

fn set_of(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within its size (the
    // CPUs come from sched_getaffinity, below its size).
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        set
    }
}

/// Where the node and the clients run: with [`Cores::Split`] and at least two CPUs, the
/// calling thread (and what it starts from now on, the server and the busy thread
/// among them) is moved to the first, and the clients' CPUs are returned; `None`: shared.
pub(crate) fn place(cores: Cores) -> anyhow::Result<Option<libc::cpu_set_t>> {
    let cpus = allowed()?;
    let (Cores::Split, [node, clients @ ..]) = (cores, cpus.as_slice()) else {
        return Ok(None);
    };
    if clients.is_empty() {
        return Ok(None);
    }
    let node_set = set_of(&[*node]);
    // SAFETY: a valid set of the right size; affects this thread only.
    #[allow(unsafe_code)]
    let rc =
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &node_set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_setaffinity");
    }
    Ok(Some(set_of(clients)))
}

/// Moves the calling process (a client being started, in `pre_exec`) to `cpus`.
pub(crate) fn run_on(cpus: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: a valid set of the right size; async-signal-safe.
    #[allow(unsafe_code)]
    match unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpus) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_moves_this_thread_to_one_cpu_and_gives_the_clients_the_rest() {
        // On a thread of its own: the placement stays with it.
        std::thread::spawn(|| {
            let before = allowed().expect("the allowed CPUs");
            let clients = place(Cores::Split).expect("placing");
            let after = allowed().expect("the allowed CPUs");
            match before.as_slice() {
                [first, _, ..] => {
                    assert_eq!(after, vec![*first]);
                    let clients = clients.expect("the clients' CPUs");
                    for c in &before[1..] {
                        // SAFETY: reading a set within its size.
                        #[allow(unsafe_code)]
                        let set = unsafe { libc::CPU_ISSET(*c, &clients) };
                        assert!(set, "CPU {c} for the clients");
                    }
                }
                _ => assert!(clients.is_none() && after == before),
            }
            assert!(place(Cores::Shared).expect("shared").is_none());
        })
        .join()
        .expect("the placing thread");
    }
}
