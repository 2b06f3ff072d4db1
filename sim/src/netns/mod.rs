//! Network namespaces: entering one from a thread (sockets made there live in it), so that
//! kube-sim can reach a test cluster's addresses without them ever being on the host.

pub mod forward;

use std::os::fd::AsRawFd;
use std::path::Path;

/// Moves the calling thread into the network namespace at `path` (e.g. `/var/run/netns/x`).
/// Sockets the thread creates afterwards belong to that namespace, wherever they are used.
pub fn enter(path: &Path) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    // SAFETY: setns on a namespace file descriptor we own; affects only this thread.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
