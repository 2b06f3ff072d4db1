//! CPU and memory of the agent itself (not the host, as upstream reported), sampled while a
//! round runs, formatted as upstream (`"26.203%"`, `"101.00MB"`): the agent's cgroup (its
//! container, in a pod) when its files can be read, this process otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kdoctor_api::report::SystemResource;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One reading of the process counters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    /// CPU time used so far (user + system).
    pub cpu: Duration,
    /// Resident memory, bytes.
    pub rss: u64,
}

/// Parses `/proc/self/stat`: utime and stime are fields 14 and 15, counted after the command
/// name, which is in parentheses and may itself hold spaces.
pub fn parse_stat(stat: &str, ticks_per_second: u64) -> Option<Duration> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): utime is field 14, at index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000) / ticks_per_second.max(1),
    ))
}

/// Parses `VmRSS:` of `/proc/self/status` into bytes.
pub fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Where CPU and memory are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `/proc/self`: this process.
    Process,
    /// A cgroup's files.
    Cgroup(CgroupFiles),
}

/// The CPU and memory files of a cgroup (v2 or v1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupFiles {
    /// `cpu.stat` (v2, `usage_usec`) or `cpuacct.usage` (v1, nanoseconds).
    pub cpu: PathBuf,
    /// `memory.current` (v2) or `memory.usage_in_bytes` (v1).
    pub memory: PathBuf,
}

/// The cgroup files of this process from `/proc/self/cgroup` text, under `root`
/// (`/sys/fs/cgroup`): the unified (v2) hierarchy when it has a CPU controller file, else the
/// v1 `cpuacct` and `memory` hierarchies.
pub fn cgroup_files(proc_cgroup: &str, root: &Path) -> Option<CgroupFiles> {
    let mut v1_cpu = None;
    let mut v1_memory = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        if controllers.is_empty() {
            let dir = root.join(relative);
            let files = CgroupFiles {
                cpu: dir.join("cpu.stat"),
                memory: dir.join("memory.current"),
            };
            if files.cpu.exists() && files.memory.exists() {
                return Some(files);
            }
            let unified = root.join("unified").join(relative);
            if unified.join("cpu.stat").exists() && unified.join("memory.current").exists() {
                return Some(CgroupFiles {
                    cpu: unified.join("cpu.stat"),
                    memory: unified.join("memory.current"),
                });
            }
            continue;
        }
        let names: Vec<&str> = controllers.split(',').collect();
        if names.contains(&"cpuacct") {
            v1_cpu = Some(root.join(controllers).join(relative).join("cpuacct.usage"));
        }
        if names.contains(&"memory") {
            v1_memory = Some(
                root.join("memory")
                    .join(relative)
                    .join("memory.usage_in_bytes"),
            );
        }
    }
    match (v1_cpu, v1_memory) {
        (Some(cpu), Some(memory)) if cpu.exists() && memory.exists() => {
            Some(CgroupFiles { cpu, memory })
        }
        _ => None,
    }
}

impl Source {
    /// The agent's own cgroup when readable, else this process.
    pub fn own_cgroup_or_process() -> Source {
        std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|text| cgroup_files(&text, Path::new("/sys/fs/cgroup")))
            .filter(|files| read_cgroup(files).is_some())
            .map(Source::Cgroup)
            .unwrap_or(Source::Process)
    }

    /// One reading.
    pub fn read(&self) -> Option<Reading> {
        match self {
            Source::Process => read(),
            Source::Cgroup(files) => read_cgroup(files),
        }
    }
}

/// Reads a cgroup's CPU time and memory.
pub fn read_cgroup(files: &CgroupFiles) -> Option<Reading> {
    let cpu_text = std::fs::read_to_string(&files.cpu).ok()?;
    let cpu = if files.cpu.ends_with("cpu.stat") {
        let usec: u64 = cpu_text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))?
            .trim()
            .parse()
            .ok()?;
        Duration::from_micros(usec)
    } else {
        Duration::from_nanos(cpu_text.trim().parse().ok()?)
    };
    let rss = std::fs::read_to_string(&files.memory)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Reading { cpu, rss })
}

/// Reads the counters of this process (Linux); `None` elsewhere.
pub fn read() -> Option<Reading> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    // USER_HZ is 100 on every Linux architecture the agent ships for.
    Some(Reading {
        cpu: parse_stat(&stat, 100)?,
        rss: parse_rss(&status)?,
    })
}

/// CPU percentages between consecutive readings, and the largest memory seen.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// CPU use of each interval, percent of one core.
    pub cpu_percent: Vec<f64>,
    /// Largest resident memory, bytes.
    pub max_rss: u64,
}

impl Usage {
    /// Adds the interval between two readings `wall` apart.
    pub fn add(&mut self, before: Reading, after: Reading, wall: Duration) {
        if !wall.is_zero() {
            let used = after.cpu.saturating_sub(before.cpu);
            self.cpu_percent
                .push(100.0 * used.as_secs_f64() / wall.as_secs_f64());
        }
        self.max_rss = self.max_rss.max(before.rss).max(after.rss);
    }

    /// Upstream's formatting: `"%.3f%%"` for CPU and `"%.2fMB"` of whole MiB for memory.
    pub fn system_resource(&self) -> SystemResource {
        let max = self.cpu_percent.iter().copied().fold(0.0, f64::max);
        let mean = if self.cpu_percent.is_empty() {
            0.0
        } else {
            self.cpu_percent.iter().sum::<f64>() / self.cpu_percent.len() as f64
        };
        SystemResource {
            max_cpu: format!("{max:.3}%"),
            mean_cpu: format!("{mean:.3}%"),
            max_memory: format!("{:.2}MB", (self.max_rss / (1024 * 1024)) as f64),
        }
    }
}

/// Samples every `interval` until stopped.
pub struct Sampler {
    task: JoinHandle<Usage>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl Sampler {
    /// Starts sampling this process (upstream: every
    /// `ENV_AGENT_RESOURCE_COLLECT_INTERVAL_IN_SECOND`, 1 s).
    pub fn start(interval: Duration) -> Sampler {
        Sampler::start_with(interval, Source::Process)
    }

    /// Starts sampling `source`.
    pub fn start_with(interval: Duration, source: Source) -> Sampler {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut usage = Usage::default();
            let Some(mut last) = source.read() else {
                return usage;
            };
            let mut at = Instant::now();
            loop {
                let done = tokio::select! {
                    _ = tokio::time::sleep(interval) => false,
                    _ = &mut stopped => true,
                };
                if let Some(now) = source.read() {
                    let wall = at.elapsed();
                    usage.add(last, now, wall);
                    last = now;
                    at = Instant::now();
                }
                if done {
                    return usage;
                }
            }
        });
        Sampler { task, stop }
    }

    /// Stops and returns what was seen (including the interval up to now).
    pub async fn finish(self) -> Usage {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "1234 (kdoctor (x) y) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0";
        assert_eq!(parse_stat(stat, 100), Some(Duration::from_secs(3)));
        assert_eq!(parse_stat("garbage", 100), None);
        let status = "Name:\tkdoctor\nVmRSS:\t   20480 kB\nThreads: 3\n";
        assert_eq!(parse_rss(status), Some(20 * 1024 * 1024));
        assert_eq!(parse_rss("Name: x"), None);
    }

    #[test]
    fn formats_as_upstream() {
        let mut u = Usage::default();
        let r = |cpu_ms, rss| Reading {
            cpu: Duration::from_millis(cpu_ms),
            rss,
        };
        u.add(r(0, 10 << 20), r(262, 101 << 20), Duration::from_secs(1));
        u.add(r(262, 101 << 20), r(300, 50 << 20), Duration::from_secs(1));
        let s = u.system_resource();
        assert_eq!(s.max_cpu, "26.200%");
        assert_eq!(s.mean_cpu, "15.000%");
        assert_eq!(s.max_memory, "101.00MB");
        assert_eq!(Usage::default().system_resource().max_cpu, "0.000%");
    }

    #[test]
    fn finds_cgroup_v2_and_v1_files() {
        let root = std::env::temp_dir().join(format!("kdoctor-cgroup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let v2 = root.join("kubepods/pod1/c1");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(
            v2.join("cpu.stat"),
            "usage_usec 2500000\nuser_usec 2000000\n",
        )
        .unwrap();
        std::fs::write(v2.join("memory.current"), "104857600\n").unwrap();
        let files = cgroup_files("0::/kubepods/pod1/c1\n", &root).unwrap();
        assert_eq!(
            read_cgroup(&files),
            Some(Reading {
                cpu: Duration::from_millis(2500),
                rss: 100 << 20
            })
        );
        let cpu = root.join("cpu,cpuacct/docker/x");
        let memory = root.join("memory/docker/x");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(&memory).unwrap();
        std::fs::write(cpu.join("cpuacct.usage"), "1500000000\n").unwrap();
        std::fs::write(memory.join("memory.usage_in_bytes"), "2048\n").unwrap();
        let text = "4:memory:/docker/x\n2:cpu,cpuacct:/docker/x\n0::/\n";
        let files = cgroup_files(text, &root).unwrap();
        assert_eq!(
            read_cgroup(&files),
            Some(Reading {
                cpu: Duration::from_millis(1500),
                rss: 2048
            })
        );
        assert_eq!(cgroup_files("0::/missing\n", &root), None);
        let _ = std::fs::remove_dir_all(&root);
        // Whatever this machine has, the agent gets a source that reads.
        assert!(Source::own_cgroup_or_process().read().is_some());
    }

    #[test]
    fn reads_this_process() {
        let r = read().expect("Linux /proc");
        assert!(r.rss > 0);
    }
}
