//! What a container needs to start, and `kube-sim pod-init`, which starts it: the kubelet writes
//! a [`Launch`] as JSON and runs `kube-sim pod-init FILE` with the container's log as its output;
//! pod-init enters the pod's network namespace, sets its sysctls, builds the container's root
//! file system in a mount namespace of its own (a tmpfs holding the image's files, the volumes
//! at their mount paths, the pod's /etc/hosts and /etc/resolv.conf), pivots into it, takes the
//! container's user and groups, and executes the program. So the container sees the paths its
//! manifest names (/etc/tls/ca.crt, /var/run/secrets/kubernetes.io/serviceaccount/token) and
//! its arguments run unmodified, as under a container runtime.
//!
//! It runs in a fresh single-threaded process (not after fork in the multi-threaded kubelet),
//! so ordinary Rust with error messages is safe here.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A bind mount into the container's root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    /// On the host.
    pub source: PathBuf,
    /// Inside the container (absolute).
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Everything pod-init needs to start one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// The pod's network namespace (None: the node's, for hostNetwork pods).
    pub netns: Option<PathBuf>,
    /// The pod's hostname.
    pub hostname: String,
    /// An empty directory on the host where the container's root is assembled.
    pub root: PathBuf,
    /// Bind mounts, in order (the image's files first, then volumes).
    pub binds: Vec<Bind>,
    /// Network sysctls of the pod (already checked against the safe list).
    pub sysctls: Vec<(String, String)>,
    /// securityContext.readOnlyRootFilesystem.
    pub read_only_root: bool,
    /// The user, group and supplementary groups the program runs as.
    pub uid: u32,
    /// Primary group.
    pub gid: u32,
    /// Supplementary groups (fsGroup, supplementalGroups).
    pub groups: Vec<u32>,
    /// allowPrivilegeEscalation: false sets no_new_privs.
    pub no_new_privs: bool,
    /// The capabilities the container keeps (capabilities.rs): the bounding set; also the
    /// permitted and effective sets of a process that stays uid 0.
    pub capabilities: Vec<u32>,
    /// Working directory inside the container.
    pub workdir: String,
    /// The program's path inside the container, then its arguments.
    pub argv: Vec<String>,
    /// The environment, in order.
    pub env: Vec<(String, String)>,
}

/// Why pod-init could not start the container.
#[derive(Debug, thiserror::Error)]
#[error("pod-init: {step}: {source}")]
pub struct InitError {
    step: String,
    #[source]
    source: io::Error,
}

fn step<T>(what: impl Into<String>, r: io::Result<T>) -> Result<T, InitError> {
    r.map_err(|source| InitError {
        step: what.into(),
        source,
    })
}

fn cstr(p: impl AsRef<std::ffi::OsStr>) -> io::Result<CString> {
    CString::new(p.as_ref().as_bytes()).map_err(|_| io::Error::other("a NUL byte in a path"))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn mount(
    source: &str,
    target: &Path,
    fstype: &str,
    flags: libc::c_ulong,
    data: &str,
) -> io::Result<()> {
    let (s, t, f, d) = (cstr(source)?, cstr(target)?, cstr(fstype)?, cstr(data)?);
    // SAFETY: valid NUL-terminated strings for the duration of the call.
    check(unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            f.as_ptr(),
            flags,
            d.as_ptr().cast::<libc::c_void>(),
        )
    })
}

fn bind(source: &Path, target: &Path, read_only: bool) -> io::Result<()> {
    let (s, t) = (cstr(source)?, cstr(target)?);
    let flags = libc::MS_BIND | libc::MS_REC;
    // SAFETY: valid strings; a bind mount inside our private mount namespace.
    check(unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    })?;
    if read_only {
        // A bind mount takes read-only only on a remount.
        // SAFETY: as above.
        check(unsafe {
            libc::mount(
                std::ptr::null(),
                t.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_REC,
                std::ptr::null(),
            )
        })?;
    }
    Ok(())
}

/// `target` inside `root` (targets are absolute container paths).
fn inside(root: &Path, target: &Path) -> PathBuf {
    root.join(target.strip_prefix("/").unwrap_or(target))
}

/// Creates the mount point of `source` at `at`: a directory, or an empty file for a file.
fn mount_point(source: &Path, at: &Path) -> io::Result<()> {
    if source.is_dir() {
        std::fs::create_dir_all(at)
    } else {
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if !at.exists() {
            std::fs::File::create(at)?;
        }
        Ok(())
    }
}

/// Sets up the container and replaces this process with its program. Returns only on error.
pub fn exec(launch: &Launch) -> InitError {
    match setup(launch) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

enum Never {}

fn setup(l: &Launch) -> Result<Never, InitError> {
    if let Some(netns) = &l.netns {
        step(
            format!("entering the pod's network namespace {}", netns.display()),
            crate::netns::enter(netns),
        )?;
    }
    for (key, value) in &l.sysctls {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        step(
            format!("sysctl {key}={value}"),
            std::fs::write(&path, value),
        )?;
    }
    // SAFETY: unshare affects only this (single-threaded) process.
    step(
        "unshare (mount, UTS, IPC)",
        check(unsafe {
            libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC)
        }),
    )?;
    let host = cstr(&l.hostname).map_err(|e| InitError {
        step: "hostname".into(),
        source: e,
    })?;
    // SAFETY: a valid buffer of the given length.
    step(
        "sethostname",
        check(unsafe { libc::sethostname(host.as_ptr(), l.hostname.len()) }),
    )?;
    // Nothing mounted below is seen by the node.
    step(
        "making / private",
        mount(
            "none",
            Path::new("/"),
            "",
            libc::MS_REC | libc::MS_PRIVATE,
            "",
        ),
    )?;
    let root = &l.root;
    step("creating the root", std::fs::create_dir_all(root))?;
    step(
        "mounting the root tmpfs",
        mount(
            "kube-sim-root",
            root,
            "tmpfs",
            libc::MS_NOSUID,
            "mode=0755,size=64m",
        ),
    )?;
    // Debian's merged /usr, as the image's base (distroless) has it.
    for (link, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("sbin", "usr/sbin"),
    ] {
        step(
            format!("/{link}"),
            std::os::unix::fs::symlink(to, root.join(link)),
        )?;
    }
    for dir in [
        "usr/bin",
        "etc",
        "proc",
        "dev",
        "sys",
        "tmp",
        "var/run",
        "home/nonroot",
        "root",
    ] {
        step(format!("/{dir}"), std::fs::create_dir_all(root.join(dir)))?;
    }
    step(
        "/tmp",
        std::fs::set_permissions(
            root.join("tmp"),
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        ),
    )?;
    for b in &l.binds {
        let at = inside(root, &b.target);
        step(
            format!("mount point {}", b.target.display()),
            mount_point(&b.source, &at),
        )?;
        step(
            format!("mounting {} at {}", b.source.display(), b.target.display()),
            bind(&b.source, &at, b.read_only),
        )?;
    }
    step(
        "mounting /proc",
        mount(
            "proc",
            &root.join("proc"),
            "proc",
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            "",
        ),
    )?;
    // sysfs of the pod's own network namespace (its interfaces), read-only.
    step(
        "mounting /sys",
        mount(
            "sysfs",
            &root.join("sys"),
            "sysfs",
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
            "",
        ),
    )?;
    let dev = root.join("dev");
    step(
        "mounting /dev",
        mount(
            "kube-sim-dev",
            &dev,
            "tmpfs",
            libc::MS_NOSUID,
            "mode=0755,size=64k",
        ),
    )?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let at = dev.join(node);
        step(format!("/dev/{node}"), std::fs::File::create(&at).map(drop))?;
        step(
            format!("/dev/{node}"),
            bind(&Path::new("/dev").join(node), &at, false),
        )?;
    }
    step("/dev/shm", std::fs::create_dir_all(dev.join("shm")))?;
    step(
        "mounting /dev/shm",
        mount(
            "shm",
            &dev.join("shm"),
            "tmpfs",
            libc::MS_NOSUID | libc::MS_NODEV,
            "mode=1777,size=64m",
        ),
    )?;
    // pivot_root's put-old directory, made while the root is still writable.
    step(
        "pivot_root",
        std::fs::create_dir_all(root.join(".old-root")),
    )?;
    if l.read_only_root {
        step(
            "making the root read-only",
            mount(
                "none",
                root,
                "",
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID,
                "",
            ),
        )?;
    }
    pivot(root)?;
    let workdir = if l.workdir.is_empty() {
        "/"
    } else {
        &l.workdir
    };
    step(
        format!("chdir {workdir}"),
        std::env::set_current_dir(workdir),
    )?;
    credentials(l)?;
    let argv: Vec<CString> = l
        .argv
        .iter()
        .map(cstr)
        .collect::<io::Result<_>>()
        .map_err(|e| InitError {
            step: "argv".into(),
            source: e,
        })?;
    let envp: Vec<CString> = l
        .env
        .iter()
        .map(|(k, v)| cstr(format!("{k}={v}")))
        .collect::<io::Result<_>>()
        .map_err(|e| InitError {
            step: "env".into(),
            source: e,
        })?;
    let Some(program) = argv.first() else {
        return Err(InitError {
            step: "exec".into(),
            source: io::Error::other("no program"),
        });
    };
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    // SAFETY: NUL-terminated arrays of valid strings; execve returns only on failure.
    unsafe { libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr()) };
    Err(InitError {
        step: format!("executing {}", l.argv[0]),
        source: io::Error::last_os_error(),
    })
}

/// pivot_root into `root` and drop the old root, so nothing of the node's file system remains
/// reachable but what was bound in.
fn pivot(root: &Path) -> Result<(), InitError> {
    let old = root.join(".old-root");
    let (new_c, old_c) = (
        cstr(root).map_err(|e| InitError {
            step: "pivot_root".into(),
            source: e,
        })?,
        cstr(&old).map_err(|e| InitError {
            step: "pivot_root".into(),
            source: e,
        })?,
    );
    // SAFETY: valid paths; root is a mount point (the tmpfs), old is under it.
    step(
        "pivot_root",
        check(unsafe {
            libc::syscall(libc::SYS_pivot_root, new_c.as_ptr(), old_c.as_ptr()) as libc::c_int
        }),
    )?;
    step("chdir /", std::env::set_current_dir("/"))?;
    let old_in = cstr("/.old-root").map_err(|e| InitError {
        step: "umount".into(),
        source: e,
    })?;
    // SAFETY: a valid path; detaches the node's root from this namespace.
    step(
        "unmounting the old root",
        check(unsafe { libc::umount2(old_in.as_ptr(), libc::MNT_DETACH) }),
    )?;
    // A read-only root keeps the empty directory; that is harmless.
    let _ = std::fs::remove_dir("/.old-root");
    Ok(())
}

fn credentials(l: &Launch) -> Result<(), InitError> {
    // While still root: a capability out of the bounding set can never come back, not even
    // through a setuid binary.
    step("capability bounding set", bound(&l.capabilities))?;
    let groups: Vec<libc::gid_t> = l.groups.clone();
    // SAFETY: a valid array of the given length.
    step(
        "setgroups",
        check(unsafe { libc::setgroups(groups.len(), groups.as_ptr()) }),
    )?;
    // SAFETY: plain credential calls.
    step("setgid", check(unsafe { libc::setgid(l.gid) }))?;
    // Leaving uid 0 clears every capability, as a container runtime leaves a non-root process.
    step("setuid", check(unsafe { libc::setuid(l.uid) }))?;
    if l.uid == 0 {
        step("capabilities", keep_only(&l.capabilities))?;
    }
    if l.no_new_privs {
        // SAFETY: prctl with constant arguments.
        step(
            "no_new_privs",
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }),
        )?;
    }
    Ok(())
}

/// Drops every capability not in `kept` from the bounding set.
pub fn bound(kept: &[u32]) -> io::Result<()> {
    // Numbers past the kernel's last capability answer EINVAL: the end of the list.
    for cap in 0..64u32 {
        if kept.contains(&cap) {
            continue;
        }
        // SAFETY: prctl with plain integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Makes `kept` the permitted and effective capabilities of this (uid 0) process, none
/// inheritable.
pub fn keep_only(kept: &[u32]) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut data = [Data::default(); 2];
    for &cap in kept.iter().filter(|&&c| c < 64) {
        let word = &mut data[(cap / 32) as usize];
        word.effective |= 1 << (cap % 32);
        word.permitted |= 1 << (cap % 32);
    }
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    // SAFETY: capset with a version-3 header and its two data words, as capset(2) says.
    check(unsafe {
        libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) as libc::c_int
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_inside_the_root() {
        let root = Path::new("/run/pods/x/root");
        assert_eq!(
            inside(root, Path::new("/etc/tls")),
            PathBuf::from("/run/pods/x/root/etc/tls")
        );
        assert_eq!(
            inside(root, Path::new("relative")),
            PathBuf::from("/run/pods/x/root/relative")
        );
    }

    const CAPS_CHILD: &str = "KUBE_SIM_CAPABILITIES_CHILD";

    /// In the child (the env var set): keeps NET_BIND_SERVICE alone, as pod-init does for a
    /// uid-0 container that drops ALL and adds it, then prints its capability sets. In the
    /// parent: nothing.
    #[test]
    fn capabilities_child_keeps_one_and_prints_its_sets() {
        if std::env::var(CAPS_CHILD).is_err() {
            return;
        }
        bound(&[10]).expect("bounding set");
        keep_only(&[10]).expect("capset");
        // Capabilities are a thread's (pod-init execs from the thread that set them).
        let status = std::fs::read_to_string("/proc/thread-self/status").expect("status");
        for line in status.lines().filter(|l| l.starts_with("Cap")) {
            println!("SETS {line}");
        }
    }

    #[test]
    fn a_root_container_keeps_exactly_its_capabilities() {
        if std::env::var(CAPS_CHILD).is_ok() {
            return;
        }
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            crate::testcluster::missing(
                "pod-init's capability sets",
                "cutting the bounding set needs root (hack/test.sh runs as root)",
            );
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "kubelet::launch::tests::capabilities_child_keeps_one_and_prints_its_sets",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CAPS_CHILD, "1")
            .output()
            .expect("child runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let sets: std::collections::BTreeMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.split_once("SETS ").map(|(_, s)| s))
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        let bit = "0000000000000400"; // 1 << 10
        assert_eq!(sets.get("CapBnd"), Some(&bit), "{text}");
        assert_eq!(sets.get("CapPrm"), Some(&bit), "{text}");
        assert_eq!(sets.get("CapEff"), Some(&bit), "{text}");
        assert_eq!(sets.get("CapInh"), Some(&"0000000000000000"), "{text}");
    }

    #[test]
    fn launch_round_trips_as_json() {
        let l = Launch {
            netns: Some("/var/run/netns/p".into()),
            hostname: "agent-x".into(),
            root: "/tmp/r".into(),
            binds: vec![Bind {
                source: "/a".into(),
                target: "/b".into(),
                read_only: true,
            }],
            sysctls: vec![("net.ipv4.ip_unprivileged_port_start".into(), "80".into())],
            read_only_root: true,
            uid: 65532,
            gid: 65532,
            groups: vec![65532],
            no_new_privs: true,
            capabilities: vec![10],
            workdir: "/".into(),
            argv: vec!["/usr/bin/kdoctor".into(), "agent".into()],
            env: vec![("A".into(), "b".into())],
        };
        let text = serde_json::to_string(&l).expect("json");
        assert_eq!(serde_json::from_str::<Launch>(&text).expect("parse"), l);
    }
}
