use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::metrics::Metrics;
use crate::probe::outcome::{Attempt, ErrorClass};
use crate::probe::{Plan, Progress, run};

async fn echo_port(ip: std::net::IpAddr) -> (SocketAddr, Metrics, tokio::task::JoinHandle<()>) {
    let socket = crate::udp_echo::bind(SocketAddr::new(ip, 0)).expect("bind");
    let addr = socket.local_addr().expect("addr");
    let metrics = Metrics::new();
    let task = crate::udp_echo::serve(socket, metrics.clone());
    (addr, metrics, task)
}

#[tokio::test]
async fn an_echo_port_answers_with_the_hops_it_read_and_a_closed_port_refuses() {
    let (addr, metrics, task) = echo_port(Ipv4Addr::LOCALHOST.into()).await;
    let prober = UdpProber::new(addr, 100).expect("prober");
    for _ in 0..3 {
        let attempt = prober.probe().await;
        assert_eq!(attempt.result, Ok(()));
        assert_eq!(attempt.bytes, 100);
        let echo = attempt.echo.expect("an echo reading");
        // Over loopback no router is crossed: the TTL arrives as sent, both ways.
        assert_eq!((echo.forward_hops, echo.return_hops), (Some(0), Some(0)));
        assert!(
            echo.round_trip
                .is_some_and(|rt| rt < Duration::from_secs(1)),
            "the kernel timestamped the echo: {echo:?}"
        );
        assert!(!echo.reordered);
    }
    assert_eq!(metrics.udp_echo.with_label_values(&["echoed"]).get(), 3);
    task.abort();

    let closed = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let prober = UdpProber::new(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), 64).expect("p");
    let attempt = tokio::time::timeout(Duration::from_secs(2), prober.probe())
        .await
        .expect("an ICMP port unreachable ends the request");
    assert_eq!(
        attempt.result.map_err(|e| e.class),
        Err(ErrorClass::Refused)
    );
}

#[tokio::test]
async fn ipv6_echoes_carry_the_hop_limit() {
    let Ok(probe) = std::net::UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)) else {
        eprintln!("no IPv6 loopback here: nothing to test");
        return;
    };
    drop(probe);
    let (addr, _metrics, task) = echo_port(Ipv6Addr::LOCALHOST.into()).await;
    let prober = UdpProber::new(addr, HEADER_BYTES).expect("prober");
    let echo = prober.probe().await.echo.expect("an echo");
    assert_eq!((echo.forward_hops, echo.return_hops), (Some(0), Some(0)));
    task.abort();
}

#[tokio::test]
async fn foreign_datagrams_are_not_echoed_and_sizes_out_of_range_are_refused() {
    let (addr, metrics, task) = echo_port(Ipv4Addr::LOCALHOST.into()).await;
    let client = tokio::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    client.send_to(b"hello, echo", addr).await.expect("send");
    // An echo sent back to the port is not echoed again.
    let mut echo = vec![0u8; 64];
    Request {
        stream: 1,
        seq: 0,
        sent_ns: 0,
    }
    .write(&mut echo);
    assert!(wire::make_echo(&mut echo, None, 1));
    client.send_to(&echo, addr).await.expect("send");
    let malformed = metrics.udp_echo.with_label_values(&["malformed"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while malformed.get() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(malformed.get(), 2);
    let mut buf = [0u8; 128];
    assert!(
        tokio::time::timeout(Duration::from_millis(200), client.recv(&mut buf))
            .await
            .is_err(),
        "nothing comes back"
    );
    task.abort();
    assert!(UdpProber::new(addr, HEADER_BYTES - 1).is_err());
    assert!(UdpProber::new(addr, MAX_BYTES + 1).is_err());
}

/// A stand-in path that drops every third datagram, sends every fifth twice, and holds every
/// seventh back behind the next: what the stream's counts must show.
async fn lossy_path(upstream: SocketAddr) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let front = tokio::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    let addr = front.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let back = tokio::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind");
        back.connect(upstream).await.expect("connect");
        let mut client = None;
        let mut held: Option<Vec<u8>> = None;
        let mut n = 0u64;
        let mut buf = vec![0u8; 2048];
        let mut echo = vec![0u8; 2048];
        loop {
            tokio::select! {
                got = front.recv_from(&mut buf) => {
                    let Ok((len, from)) = got else { continue };
                    client = Some(from);
                    n += 1;
                    if n.is_multiple_of(3) {
                        continue;
                    }
                    let _ = back.send(&buf[..len]).await;
                    if n.is_multiple_of(5) {
                        let _ = back.send(&buf[..len]).await;
                    }
                }
                got = back.recv(&mut echo) => {
                    let (Ok(len), Some(client)) = (got, client) else { continue };
                    let seq = wire::read_echo(&echo[..len]).map(|e| e.request.seq);
                    if seq.is_some_and(|s| s % 7 == 6) && held.is_none() {
                        held = Some(echo[..len].to_vec());
                        continue;
                    }
                    let _ = front.send_to(&echo[..len], client).await;
                    if let Some(late) = held.take() {
                        let _ = front.send_to(&late, client).await;
                    }
                }
            }
        }
    });
    (addr, task)
}

#[tokio::test]
async fn loss_duplicates_and_reordering_on_the_path_are_counted() {
    let (echo, _metrics, echo_task) = echo_port(Ipv4Addr::LOCALHOST.into()).await;
    let (path, path_task) = lossy_path(echo).await;
    let prober = Arc::new(UdpProber::new(path, 64).expect("prober"));
    // 30 datagrams, far enough apart that each is echoed before the next is sent.
    let plan = Plan::new(
        200.0,
        Duration::from_millis(150),
        Duration::from_millis(100),
    )
    .expect("plan");
    let m = run(prober, plan, Arc::new(Progress::default()), None).await;
    echo_task.abort();
    path_task.abort();
    let r = &m.recorder;
    assert_eq!(r.requests, 30);
    let lost = r.requests - r.successes;
    assert_eq!(lost, 10, "every third datagram is dropped: {:?}", r.errors);
    let tally = r.datagrams.as_ref().expect("datagram counts");
    assert_eq!(tally.payload_bytes, 64);
    // Datagrams 5, 10, … that were forwarded (not dropped) were sent twice.
    let doubled = (1..=30).filter(|n| n % 5 == 0 && n % 3 != 0).count() as u64;
    assert_eq!(tally.duplicates, doubled);
    assert!(
        tally.reordered > 0,
        "held-back echoes come after later ones"
    );
    assert_eq!(tally.forward_hops.most_seen(), Some(0));
}

/// Runs `body` on a thread of its own network namespace (loopback up), whose
/// `net.ipv4.ping_group_range` is `range`: ICMP sockets are allowed or refused there whatever
/// the machine's own setting.
pub(crate) fn in_namespace<T: Send + 'static>(
    range: &'static str,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread's network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            panic!(
                "unshare(CLONE_NEWNET): {} (the test needs root)",
                std::io::Error::last_os_error()
            );
        }
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("ip link set lo up");
        assert!(up.success());
        std::fs::write("/proc/sys/net/ipv4/ping_group_range", range)
            .expect("setting this namespace's ping_group_range");
        body()
    })
    .join()
    .expect("the namespace's thread")
}

fn icmp_probes(addr: SocketAddr, n: usize) -> Vec<Attempt> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            let prober = IcmpProber::new(addr, 64).expect("prober");
            let mut attempts = Vec::new();
            for _ in 0..n {
                // The engine bounds every request; called alone, the test bounds it.
                let attempt = tokio::time::timeout(Duration::from_secs(2), prober.probe())
                    .await
                    .unwrap_or_else(|_| {
                        Attempt::failed(ProbeError::new(ErrorClass::Timeout, "no echo in 2 s"))
                    });
                attempts.push(attempt);
            }
            attempts
        })
}

/// Makes this thread an ordinary user (nobody), without `CAP_NET_RAW` as a pod not granted it:
/// the raw system call changes this thread's credentials alone, where libc's would change the
/// whole test process's.
fn become_nobody() {
    const NOBODY: libc::c_long = 65_534;
    // SAFETY: setresuid takes three integers and touches nothing in this process's memory.
    let rc = unsafe { libc::syscall(libc::SYS_setresuid, NOBODY, NOBODY, NOBODY) };
    assert_eq!(rc, 0, "setresuid: {}", std::io::Error::last_os_error());
}

fn assert_answered_with_hops_back(attempts: &[Attempt]) {
    assert_eq!(attempts.len(), 6);
    for attempt in attempts {
        assert_eq!(attempt.result, Ok(()), "{attempts:?}");
        let echo = attempt.echo.expect("an echo reading");
        assert_eq!(
            (echo.forward_hops, echo.return_hops),
            (None, Some(0)),
            "an ICMP reply tells the hops back only"
        );
        assert!(echo.transit_ns > 0, "the round trip: {echo:?}");
    }
}

fn icmp_both_families() -> Vec<Attempt> {
    let mut all = icmp_probes(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), 3);
    all.extend(icmp_probes(SocketAddr::from((Ipv6Addr::LOCALHOST, 0)), 3));
    all
}

#[test]
fn icmp_echoes_are_answered_on_a_ping_socket_or_else_a_raw_one_and_a_refused_socket_says_why() {
    // The group allowed: ping sockets.
    assert_answered_with_hops_back(&in_namespace("0 2147483647", icmp_both_families));
    // No group allowed, CAP_NET_RAW held (the tests run as root): raw sockets, which also see
    // the requests going out on loopback and must take only the replies.
    assert_answered_with_hops_back(&in_namespace("1 0", icmp_both_families));
    let refused = in_namespace("1 0", || {
        become_nobody();
        icmp_probes(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), 1)
    });
    let error = refused[0].result.clone().expect_err("no ICMP socket");
    assert!(
        error.detail.contains("net.ipv4.ping_group_range") && error.detail.contains("CAP_NET_RAW"),
        "{error}"
    );
}

#[test]
fn the_path_mtu_is_the_route_s_or_where_larger_packets_vanish() {
    let (whole, holed) = in_namespace("1 0", || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(async {
                let (addr, _metrics, task) = echo_port(Ipv4Addr::LOCALHOST.into()).await;
                let timeout = Duration::from_millis(100);
                let whole = pmtu::discover(addr, timeout).await.expect("search");
                // Packets above 1,400 bytes vanish on the way in, with no error to anyone.
                let dropped = std::process::Command::new("iptables")
                    .args([
                        "-A",
                        "INPUT",
                        "-p",
                        "udp",
                        "--dport",
                        &addr.port().to_string(),
                    ])
                    .args(["-m", "length", "--length", "1401:65535", "-j", "DROP"])
                    .status()
                    .expect("iptables");
                assert!(dropped.success());
                let holed = pmtu::discover(addr, timeout).await.expect("search");
                task.abort();
                (whole, holed)
            })
    });
    assert_eq!(
        whole,
        Some(pmtu::PathMtu {
            bytes: 65_535,
            limit: pmtu::Limit::Interface
        }),
        "loopback takes the largest datagram"
    );
    assert_eq!(
        holed,
        Some(pmtu::PathMtu {
            bytes: 1_400,
            limit: pmtu::Limit::BlackHole
        })
    );
}

#[test]
fn a_round_trip_is_the_kernel_s_span_and_a_stepped_clock_gives_none() {
    assert_eq!(
        round_trip(1_000, Some(31_000)),
        Some(Duration::from_micros(30))
    );
    assert_eq!(round_trip(1_000, None), None, "no kernel time");
    assert_eq!(round_trip(31_000, Some(1_000)), None, "the clock went back");
    assert_eq!(
        round_trip(0, Some(u64::MAX)),
        None,
        "the clock jumped ahead"
    );
}
