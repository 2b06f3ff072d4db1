//! Crash points for tests (feature `testing`): a process whose `KDOCTOR_STORE_FAILPOINT` names
//! the point dies there at once (abort: no destructor runs, nothing more is flushed), as a
//! SIGKILL at that instant would leave it. Compiled to nothing otherwise.

/// Dies here when the test asked for this point.
#[inline]
pub(crate) fn hit(point: &str) {
    #[cfg(feature = "testing")]
    if std::env::var("KDOCTOR_STORE_FAILPOINT").as_deref() == Ok(point) {
        eprintln!("failpoint {point}: aborting");
        std::process::abort();
    }
    #[cfg(not(feature = "testing"))]
    let _ = point;
}
