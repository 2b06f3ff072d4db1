//! TCP connect probes (issue 33): `kdoctor probe tcp` against nping's connect mode (nmap's
//! `nping --tcp-connect`, which times the same SYN-to-established as an unprivileged
//! `connect()`), at the same fixed rates against the same nginx listener on loopback. Each rate
//! runs both tools three times, in turns; the median of each by its mean connect time is
//! quoted, with CPU per connect and the rate each held. nping prints its mean, never
//! percentiles, so means are what the two are compared on.

use super::{Options, Run, f, kdoctor_probe, timed};

fn kdoctor_tcp(o: &Options, port: u16, rate: u64, secs: u64) -> Run {
    let address = format!("127.0.0.1:{port}");
    kdoctor_probe(o, &["tcp", &address], "taskNetReach", rate, secs)
}

/// The number after `label` in nping's summary (`Avg rtt: 0.034ms`, `in 4.06 seconds`).
fn after(text: &str, label: &str) -> Option<f64> {
    let rest = &text[text.find(label)? + label.len()..];
    let number: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    number.parse().ok()
}

fn nping_tcp(port: u16, rate: u64, secs: u64) -> Run {
    let args: Vec<String> = [
        "--tcp-connect",
        "-p",
        &port.to_string(),
        "--rate",
        &rate.to_string(),
        "-c",
        &(rate * secs).to_string(),
        "-N",
        "-q",
        "127.0.0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (out, cpu_s, max_rss_kib) = timed(std::path::Path::new("nping"), &args);
    let requests = after(&out, "TCP connection attempts:").unwrap_or(0.0);
    let ok = after(&out, "Successful connections:").unwrap_or(0.0);
    let elapsed = after(&out, "pinged in").unwrap_or(secs as f64);
    Run {
        requests,
        ok,
        rate: ok / elapsed.max(1e-9),
        p50_ms: f64::NAN,
        mean_ms: after(&out, "Avg rtt:").unwrap_or(f64::NAN),
        p99_ms: f64::NAN,
        cpu_s,
        max_rss_kib,
    }
}

/// The middle of three runs by mean connect time.
fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.mean_ms.total_cmp(&b.mean_ms));
    runs.swap_remove(runs.len() / 2)
}

/// Prints the section.
pub fn section(o: &Options, port: u16) {
    let secs = o.secs.min(5);
    let mut rows = Vec::new();
    for &rate in &o.tcp_rates {
        let mut kdoctor = Vec::new();
        let mut nping = Vec::new();
        for _ in 0..3 {
            kdoctor.push(kdoctor_tcp(o, port, rate, secs));
            nping.push(nping_tcp(port, rate, secs));
        }
        rows.push((rate, median(kdoctor), median(nping)));
    }
    println!("### TCP connect, `kdoctor probe tcp` against `nping --tcp-connect`, same nginx\n");
    println!(
        "`hack/bench/agent/run.sh --only tcp --secs {secs}`: each rate for {secs} s, three runs of each tool in turns, the median by mean connect time. nping {}.\n",
        nping_version()
    );
    println!(
        "| rate/s | kdoctor held/s | kdoctor ok | kdoctor mean ms (p50, p99) | nping held/s | nping ok | nping mean ms | CPU s per 10,000 connects, kdoctor / nping | ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (rate, k, n) in &rows {
        println!(
            "| {rate} | {} | {} / {} | {} ({}, {}) | {} | {} / {} | {} | {} / {} | {} |",
            f(k.rate, 0),
            k.ok,
            k.requests,
            f(k.mean_ms, 3),
            f(k.p50_ms, 3),
            f(k.p99_ms, 3),
            f(n.rate, 0),
            n.ok,
            n.requests,
            f(n.mean_ms, 3),
            f(k.cpu_per_10k(), 3),
            f(n.cpu_per_10k(), 3),
            f(k.cpu_per_10k() / n.cpu_per_10k(), 2),
        );
    }
    println!();
}

fn nping_version() -> String {
    let out = std::process::Command::new("nping")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .find(|l| l.contains("version"))
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| "(version unknown)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nping_summary_numbers_are_read() {
        let out = "Max rtt: 997.910ms | Min rtt: 0.003ms | Avg rtt: 17.523ms\n\
                   TCP connection attempts: 3000 | Successful connections: 2990 | Failed: 10 (0.33%)\n\
                   Nping done: 1 IP address pinged in 7.57 seconds\n";
        assert_eq!(after(out, "Avg rtt:"), Some(17.523));
        assert_eq!(after(out, "TCP connection attempts:"), Some(3000.0));
        assert_eq!(after(out, "Successful connections:"), Some(2990.0));
        assert_eq!(after(out, "pinged in"), Some(7.57));
        assert_eq!(after(out, "absent:"), None);
    }
}
