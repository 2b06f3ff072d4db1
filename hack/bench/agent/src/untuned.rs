//! DNS over UDP against unbound as a cluster usually runs it: Debian's defaults, one thread and
//! the kernel's default socket buffers (issue 35). The tuned server of the sections above hides
//! what users meet: an untuned server drops queries at its own socket whenever its receive
//! queue fills, whoever sends them. Each fixed rate runs `kdoctor probe dns` and dnsperf three
//! times each, in turns; the datagrams the server's socket dropped during each run
//! (/proc/net/udp) tell the answers lost to the server's queue from any other loss.

use std::path::Path;

use super::{Dns, Options, Run, dnsperf, f, kdoctor_dns, unbound};

/// Datagrams dropped so far at the listening UDP socket on 127.0.0.1:`port` (its receive queue
/// was full): the last column of its line in /proc/net/udp.
fn server_drops(port: u16) -> u64 {
    let local = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&"00000000:0000"))
                .then(|| fields.last()?.parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// A run and what the server's socket dropped meanwhile.
struct Counted {
    run: Run,
    dropped: u64,
}

impl Counted {
    fn answered(&self) -> f64 {
        self.run.ok / self.run.requests.max(1.0)
    }
    fn lost(&self) -> f64 {
        (self.run.requests - self.run.ok).max(0.0)
    }
}

fn counted(port: u16, load: impl FnOnce() -> Run) -> Counted {
    let before = server_drops(port);
    let run = load();
    Counted {
        run,
        dropped: server_drops(port).saturating_sub(before),
    }
}

/// The middle of three by the share answered.
fn median(mut runs: Vec<Counted>) -> Counted {
    runs.sort_by(|a, b| a.answered().total_cmp(&b.answered()));
    runs.swap_remove(runs.len() / 2)
}

fn cell(c: &Counted) -> String {
    format!(
        "{} | {}% | {} of {}",
        f(c.run.rate, 0),
        f(100.0 * c.answered(), 3),
        c.dropped,
        c.lost()
    )
}

pub fn section(o: &Options) {
    let ub = unbound(false);
    let port = ub.port(Dns::Udp);
    let secs = o.secs.min(5);
    let data = std::env::temp_dir().join(format!("kdoctor-bench-untuned-{}", std::process::id()));
    std::fs::write(&data, "probe.test A\n").expect("dnsperf's query file");
    let data: &Path = &data;
    let mut rows = Vec::new();
    for &rate in &o.untuned_rates {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            ours.push(counted(port, || kdoctor_dns(o, &ub, Dns::Udp, rate, secs)));
            theirs.push(counted(port, || {
                dnsperf(&ub, Dns::Udp, Some(rate), secs, data)
            }));
        }
        rows.push((rate, median(ours), median(theirs)));
    }
    let closed = median(
        (0..3)
            .map(|_| counted(port, || dnsperf(&ub, Dns::Udp, None, secs, data)))
            .collect(),
    );
    let _ = std::fs::remove_file(data);

    println!(
        "### DNS over UDP against unbound with Debian's defaults ({secs} s per run, median of 3 by the share answered)\n"
    );
    println!(
        "One thread, the kernel's default socket buffers (net.core.rmem_default = {} bytes). \"Lost at the server's socket\": datagrams its full receive queue dropped during the run (/proc/net/udp), of all the queries the tool counted lost.\n",
        std::fs::read_to_string("/proc/sys/net/core/rmem_default")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "| q/s | kdoctor answered/s | answered | lost at the server's socket | dnsperf answered/s | answered | lost at the server's socket |"
    );
    println!("|---|---|---|---|---|---|---|");
    let (mut best_k, mut best_d) = (0, 0);
    for (rate, k, d) in &rows {
        println!("| {rate} | {} | {} |", cell(k), cell(d));
        if k.run.held(*rate) {
            best_k = best_k.max(*rate);
        }
        if d.run.held(*rate) {
            best_d = best_d.max(*rate);
        }
    }
    println!(
        "| dnsperf closed loop (10 clients, 1,000 queries outstanding) | | | | {} |",
        cell(&closed)
    );
    println!(
        "\nHighest rate held (≥ 99.9% answered, ≥ 99% of the rate): kdoctor {best_k}/s, dnsperf at a fixed rate {best_d}/s; kdoctor's ÷ dnsperf's closed-loop rate ({} answered/s, {}% answered): {}\n",
        f(closed.run.rate, 0),
        f(100.0 * closed.answered(), 3),
        f(best_k as f64 / closed.run.rate.max(1.0), 2)
    );
}
