//! The pause process of a pod sandbox: it holds the pod's namespaces and does nothing else. As
//! process 1 of the pod's PID namespace a signal without a handler is ignored, so SIGINT and
//! SIGTERM get one that exits, and SIGCHLD one that reaps the orphans it inherits.

extern "C" fn exit_now(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) }
}

extern "C" fn reap(_: libc::c_int) {
    // SAFETY: waitpid is async-signal-safe; a null status pointer is allowed.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

fn main() {
    let exit_now: extern "C" fn(libc::c_int) = exit_now;
    let reap: extern "C" fn(libc::c_int) = reap;
    // SAFETY: the handlers only call async-signal-safe functions.
    unsafe {
        libc::signal(libc::SIGINT, exit_now as libc::sighandler_t);
        libc::signal(libc::SIGTERM, exit_now as libc::sighandler_t);
        libc::signal(libc::SIGCHLD, reap as libc::sighandler_t);
    }
    loop {
        // SAFETY: pause has no preconditions; it returns after each handled signal.
        unsafe { libc::pause() };
    }
}
