//! glibc's malloc arenas sized to the threads that serve or probe. Each arena has one lock; a
//! thread keeps the arena it was given. With `MALLOC_ARENA_MAX=2` (what the manifests used to
//! set, to stop per-thread arenas from holding freed response buffers) the API server's two
//! connection threads often shared one: perf counted 1.3 futex calls per small GET, every one
//! in malloc or free, and those runs served 0.74–0.96× nginx where runs with an arena each
//! served 1.00–1.10× (docs/benchmarks.md). One arena per such thread and two for all the
//! others keeps both the lock and the RSS down.

use std::ffi::OsStr;

/// The variable with which an operator sets the arenas (glibc reads it itself at start-up).
pub const ENV: &str = "MALLOC_ARENA_MAX";

/// The arenas for a process with `hot` threads that serve connections or run probes: one each,
/// and two for all its other threads.
pub fn for_threads(hot: usize) -> usize {
    hot.max(1) + 2
}

/// The cap to set, given the operator's `MALLOC_ARENA_MAX` (`None`: unset): none when the
/// operator chose, else [`for_threads`]`(hot)`.
pub fn cap_to_set(operator: Option<&OsStr>, hot: usize) -> Option<usize> {
    match operator {
        Some(_) => None,
        None => Some(for_threads(hot)),
    }
}

/// Caps glibc's arenas for `hot` serving or probing threads unless the operator set
/// `MALLOC_ARENA_MAX`; returns the cap set. Call before the process starts threads: glibc fixes
/// the limit the first time it needs more arenas than its default test allows.
pub fn cap(hot: usize) -> Option<usize> {
    let arenas = cap_to_set(std::env::var_os(ENV).as_deref(), hot)?;
    set(arenas).then_some(arenas)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set(arenas: usize) -> bool {
    let arenas = libc::c_int::try_from(arenas).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only stores the parameter; it has no preconditions.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) == 1 }
}

/// Other allocators have no such arenas.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set(_: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_arena_per_hot_thread_and_two_for_the_rest() {
        assert_eq!(for_threads(2), 4);
        assert_eq!(for_threads(4), 6);
        assert_eq!(for_threads(0), 3);
    }

    #[test]
    fn the_operator_s_setting_wins() {
        assert_eq!(cap_to_set(Some(OsStr::new("2")), 4), None);
        assert_eq!(cap_to_set(None, 4), Some(6));
    }
}
