//! Object names, and how a requested name finds its task incarnation and round.
//!
//! | name | object |
//! |---|---|
//! | `<kind>-<task>` | the latest round of the newest incarnation of the task (upstream v0.2.2's name) |
//! | `<kind>-<task>.<tag>` | an incarnation by the first 8 hex digits of its task UID: older incarnations (a task deleted and re-created) are listed under this name |
//! | `<name>.round-<N>` | round N of the object `<name>` (get, watch by name and delete; not listed) |
//!
//! `<kind>` is the lower-case task kind (`netreach`, `apphttphealthy`, `netdns`).

use kdoctor_api::task::TaskKind;
use kdoctor_store::{Store, TaskSummary};

/// Suffix that selects a round.
pub const ROUND_SUFFIX: &str = ".round-";
/// Length of an incarnation tag.
pub const TAG_LEN: usize = 8;

/// What a name designates.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// The incarnation.
    pub task: TaskSummary,
    /// The object's canonical name (for a round object: with its round suffix).
    pub name: String,
    /// A round chosen by name, or `None` for the latest.
    pub round: Option<u64>,
}

/// The 8 hex digits naming an incarnation: the start of its UID (Kubernetes UIDs are UUIDs), or
/// a CRC-32 of it for UIDs with too few hex digits (e.g. migrated tasks).
pub fn incarnation_tag(uid: &str) -> String {
    let hex: String = uid
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .map(|c| c.to_ascii_lowercase())
        .take(TAG_LEN)
        .collect();
    if hex.len() == TAG_LEN && !uid.contains(':') {
        hex
    } else {
        format!("{:08x}", crc32(uid.as_bytes()))
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    // Bitwise CRC-32 (IEEE): a few bytes per request, no table needed.
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The listed name of an incarnation: bare when it is the newest of its task name.
pub fn object_name(task: &TaskSummary, newest: bool) -> String {
    let base = format!("{}-{}", task.kind.lowercase(), task.name);
    if newest {
        base
    } else {
        format!("{base}.{}", incarnation_tag(&task.uid))
    }
}

/// The name of round `round` of the object `name`.
pub fn round_name(name: &str, round: u64) -> String {
    format!("{name}{ROUND_SUFFIX}{round}")
}

/// Every listed object, sorted by name: one per incarnation.
pub fn listed(mut tasks: Vec<TaskSummary>) -> Vec<(String, TaskSummary)> {
    // Tasks come ordered by id, i.e. by when the store first saw them: the last of a name is
    // the newest incarnation.
    tasks.sort_by(|a, b| (a.kind, &a.name, a.id).cmp(&(b.kind, &b.name, b.id)));
    let mut objects: Vec<(String, TaskSummary)> = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.iter().enumerate() {
        let newest = tasks
            .get(i + 1)
            .is_none_or(|next| next.kind != task.kind || next.name != task.name);
        objects.push((object_name(task, newest), task.clone()));
    }
    objects.sort_by(|a, b| a.0.cmp(&b.0));
    objects
}

/// Finds what `name` designates, if anything.
pub fn resolve(store: &Store, name: &str) -> Option<Target> {
    let (kind, rest) = TaskKind::ALL.into_iter().find_map(|k| {
        name.strip_prefix(k.lowercase())
            .and_then(|r| r.strip_prefix('-'))
            .map(|r| (k, r))
    })?;
    let (base, round) = match rest.rsplit_once(ROUND_SUFFIX) {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (base, n.parse::<u64>().ok())
        }
        _ => (rest, None),
    };
    // A task may itself be named like a suffix; the plainest reading wins.
    let mut readings: Vec<(&str, Option<&str>, Option<u64>)> = vec![(rest, None, None)];
    if round.is_some() {
        readings.push((base, None, round));
    }
    for (text, round) in [(rest, None), (base, round)] {
        if let Some((task, tag)) = text.rsplit_once('.')
            && tag.len() == TAG_LEN
            && tag.bytes().all(|b| b.is_ascii_hexdigit())
        {
            readings.push((task, Some(tag), round));
        }
    }
    for (task, tag, round) in readings {
        let mut incarnations = store.find(kind, task);
        let Some(newest) = incarnations.last().map(|t| t.id) else {
            continue;
        };
        // Taken out of the list, not cloned: this runs for every GET.
        let chosen = match tag {
            None => incarnations.pop(),
            Some(tag) => incarnations
                .iter()
                .position(|t| incarnation_tag(&t.uid) == tag)
                .map(|i| incarnations.swap_remove(i)),
        };
        let Some(chosen) = chosen else {
            continue;
        };
        let object = object_name(&chosen, chosen.id == newest);
        if let Some(round) = round {
            if !matches!(store.round(chosen.id, round), Ok(Some(_))) {
                continue;
            }
            return Some(Target {
                name: round_name(&object, round),
                task: chosen,
                round: Some(round),
            });
        }
        // A tagged name of the newest incarnation answers under its tag, as asked.
        let name = if tag.is_some() {
            format!(
                "{}-{task}.{}",
                kind.lowercase(),
                incarnation_tag(&chosen.uid)
            )
        } else {
            object
        };
        return Some(Target {
            name,
            task: chosen,
            round: None,
        });
    }
    None
}
