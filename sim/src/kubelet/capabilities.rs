//! A container's Linux capabilities as a container runtime grants them: containerd's default
//! set, plus `securityContext.capabilities.add`, minus `drop` (`ALL` in either means every
//! capability). What pod-init does with the set (launch.rs): the bounding set is cut to it for
//! every process; a process that stays uid 0 keeps exactly it as permitted and effective, one
//! that becomes another user keeps none effective (as containerd leaves a non-root process:
//! no ambient capabilities).

use std::collections::BTreeSet;

use serde_json::Value;

/// Capability names and numbers (linux/capability.h), without the `CAP_` prefix.
const NAMES: [(&str, u32); 41] = [
    ("CHOWN", 0),
    ("DAC_OVERRIDE", 1),
    ("DAC_READ_SEARCH", 2),
    ("FOWNER", 3),
    ("FSETID", 4),
    ("KILL", 5),
    ("SETGID", 6),
    ("SETUID", 7),
    ("SETPCAP", 8),
    ("LINUX_IMMUTABLE", 9),
    ("NET_BIND_SERVICE", 10),
    ("NET_BROADCAST", 11),
    ("NET_ADMIN", 12),
    ("NET_RAW", 13),
    ("IPC_LOCK", 14),
    ("IPC_OWNER", 15),
    ("SYS_MODULE", 16),
    ("SYS_RAWIO", 17),
    ("SYS_CHROOT", 18),
    ("SYS_PTRACE", 19),
    ("SYS_PACCT", 20),
    ("SYS_ADMIN", 21),
    ("SYS_BOOT", 22),
    ("SYS_NICE", 23),
    ("SYS_RESOURCE", 24),
    ("SYS_TIME", 25),
    ("SYS_TTY_CONFIG", 26),
    ("MKNOD", 27),
    ("LEASE", 28),
    ("AUDIT_WRITE", 29),
    ("AUDIT_CONTROL", 30),
    ("SETFCAP", 31),
    ("MAC_OVERRIDE", 32),
    ("MAC_ADMIN", 33),
    ("SYSLOG", 34),
    ("WAKE_ALARM", 35),
    ("BLOCK_SUSPEND", 36),
    ("AUDIT_READ", 37),
    ("PERFMON", 38),
    ("BPF", 39),
    ("CHECKPOINT_RESTORE", 40),
];

/// containerd's default capabilities of a container (its `oci.DefaultCapabilities`).
const RUNTIME_DEFAULT: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// The number of a capability name (`NET_ADMIN` or `CAP_NET_ADMIN`, any case).
fn number(name: &str) -> Option<u32> {
    let name = name.to_ascii_uppercase();
    let bare = name.strip_prefix("CAP_").unwrap_or(&name);
    NAMES.iter().find(|(n, _)| *n == bare).map(|(_, v)| *v)
}

/// The capabilities a container with securityContext `sc` keeps; an unknown name is the error a
/// runtime gives (the container is not started).
pub fn kept(sc: &Value) -> Result<BTreeSet<u32>, String> {
    let list = |field: &str| -> Result<(bool, BTreeSet<u32>), String> {
        let mut all = false;
        let mut set = BTreeSet::new();
        let names = sc
            .pointer(&format!("/capabilities/{field}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for name in names {
            let name = name.as_str().unwrap_or_default();
            if name.eq_ignore_ascii_case("ALL") {
                all = true;
            } else {
                set.insert(number(name).ok_or_else(|| {
                    format!("securityContext.capabilities.{field}: unknown capability {name:?}")
                })?);
            }
        }
        Ok((all, set))
    };
    let (add_all, add) = list("add")?;
    let (drop_all, drop) = list("drop")?;
    let mut kept: BTreeSet<u32> = if add_all {
        NAMES.iter().map(|(_, v)| *v).collect()
    } else {
        RUNTIME_DEFAULT.iter().filter_map(|n| number(n)).collect()
    };
    if drop_all {
        kept.clear();
    }
    kept.retain(|c| !drop.contains(c));
    // As runtimes do: what is added explicitly survives a drop of ALL.
    kept.extend(add);
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: &BTreeSet<u32>) -> Vec<&'static str> {
        set.iter()
            .map(|c| NAMES.iter().find(|(_, v)| v == c).map(|(n, _)| *n).unwrap())
            .collect()
    }

    #[test]
    fn the_runtime_default_then_add_then_drop() {
        let none = kept(&Value::Null).unwrap();
        assert_eq!(none.len(), 14);
        assert!(
            none.contains(&13) && !none.contains(&12),
            "NET_RAW, not NET_ADMIN"
        );
        let sc = serde_json::json!({"capabilities": {"add": ["NET_ADMIN"], "drop": ["NET_RAW", "CAP_kill"]}});
        let set = kept(&sc).unwrap();
        assert!(set.contains(&12) && !set.contains(&13) && !set.contains(&5));
        assert_eq!(set.len(), 13);
    }

    #[test]
    fn drop_all_keeps_only_what_is_added() {
        let sc =
            serde_json::json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}});
        assert_eq!(names(&kept(&sc).unwrap()), ["NET_BIND_SERVICE"]);
        let sc = serde_json::json!({"capabilities": {"drop": ["ALL"]}});
        assert!(kept(&sc).unwrap().is_empty());
        let sc = serde_json::json!({"capabilities": {"add": ["ALL"]}});
        assert_eq!(kept(&sc).unwrap().len(), NAMES.len());
    }

    #[test]
    fn an_unknown_capability_is_refused_naming_it() {
        let sc = serde_json::json!({"capabilities": {"add": ["NET_FLY"]}});
        let err = kept(&sc).unwrap_err();
        assert!(
            err.contains("capabilities.add") && err.contains("NET_FLY"),
            "{err}"
        );
    }
}
