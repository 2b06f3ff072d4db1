//! The DNS prober against unbound over UDP, TCP and TLS, and against servers that fail.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::RecordType;
use kdoctor_agent::probe::Measurement;
use kdoctor_agent::probe::dns::DnsProtocol;
use kdoctor_transport::tls::{ServerTrust, read_roots};

use crate::peers::Unbound;
use crate::support::{dns_spec, errors, probe_dns, probe_dns_within};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn unbound_udp_tcp_and_tls_both_families() {
    let _shared = crate::support::shared().await;
    let unbound = Unbound::start();
    let v4: SocketAddr = ([127, 0, 0, 1], unbound.port).into();
    let v6: SocketAddr = format!("[::1]:{}", unbound.port).parse().unwrap();
    for (server, record_type) in [(v4, RecordType::A), (v6, RecordType::AAAA)] {
        for protocol in [DnsProtocol::Udp, DnsProtocol::Tcp] {
            let mut spec = dns_spec(server, "probe.test", protocol);
            spec.record_type = record_type;
            let m = probe_dns(spec, None, 50.0, SECOND).await;
            assert_eq!(m.recorder.requests, 50, "{server} {protocol:?}");
            assert_eq!(
                m.recorder.successes,
                50,
                "{server} {protocol:?}: {}",
                errors(&m)
            );
            assert_eq!(
                m.recorder.rcodes,
                BTreeMap::from([("NOERROR".to_string(), 50)])
            );
            assert!(
                m.recorder.bytes >= 50 * 40,
                "answers counted: {}",
                m.recorder.bytes
            );
        }
    }
    let tls: SocketAddr = ([127, 0, 0, 1], unbound.tls_port).into();
    let roots = read_roots(&unbound.cert).unwrap();
    let mut spec = dns_spec(tls, "probe.test", DnsProtocol::TcpTls);
    spec.tls_server_name = Some("localhost".to_string());
    let m = probe_dns(spec, Some(ServerTrust::Roots(roots)), 20.0, SECOND).await;
    assert_eq!(m.recorder.successes, 20, "{}", errors(&m));
    assert_eq!(
        m.recorder.connect.len(),
        20,
        "one TLS connection per query, as upstream"
    );
}

#[tokio::test]
async fn nxdomain_is_counted_once_as_a_failure() {
    let _shared = crate::support::shared().await;
    let unbound = Unbound::start();
    let server: SocketAddr = ([127, 0, 0, 1], unbound.port).into();
    let m = probe_dns(
        dns_spec(server, "missing.test", DnsProtocol::Udp),
        None,
        20.0,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.requests, 20);
    assert_eq!(m.recorder.successes, 0);
    assert_eq!(
        m.recorder.rcodes,
        BTreeMap::from([("NXDOMAIN".to_string(), 20)])
    );
    assert_eq!(
        m.recorder.errors,
        BTreeMap::from([("rcode NXDOMAIN".to_string(), 20)])
    );
}

#[tokio::test]
async fn tls_to_a_server_with_an_unknown_certificate_fails() {
    let _shared = crate::support::shared().await;
    let unbound = Unbound::start();
    let tls: SocketAddr = ([127, 0, 0, 1], unbound.tls_port).into();
    let roots = read_roots(&crate::peers::Nginx::start().cert).unwrap();
    let mut spec = dns_spec(tls, "probe.test", DnsProtocol::TcpTls);
    spec.tls_server_name = Some("localhost".to_string());
    let m = probe_dns(spec, Some(ServerTrust::Roots(roots)), 5.0, SECOND).await;
    assert_eq!(m.recorder.successes, 0);
    assert!(
        m.recorder.errors.keys().all(|k| k.starts_with("tls")),
        "{}",
        errors(&m)
    );
}

#[tokio::test]
async fn refused_tcp_and_silent_udp() {
    let _shared = crate::support::shared().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let closed: SocketAddr = ([127, 0, 0, 1], port).into();
    let m = probe_dns(
        dns_spec(closed, "probe.test", DnsProtocol::Tcp),
        None,
        10.0,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.successes, 0);
    let refused: i64 = m
        .recorder
        .errors
        .iter()
        .filter(|(k, _)| k.starts_with("refused"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(refused, 10, "{}", errors(&m));
    // A UDP socket that reads queries and never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let spec = dns_spec(addr, "probe.test", DnsProtocol::Udp);
    let m = probe_dns_within(spec, None, 10.0, SECOND, Duration::from_millis(200)).await;
    drop(silent);
    assert_eq!(m.recorder.requests, 10);
    assert_eq!(
        m.recorder.errors,
        BTreeMap::from([("timeout".to_string(), 10)]),
        "a lost query is one failure"
    );
    let p50 = m.recorder.response.value_at_quantile(0.5);
    assert!((200_000..260_000).contains(&p50), "{p50} µs");
}

/// A UDP server that answers each query first with an NXDOMAIN under another ID, then with
/// `answer(query)`.
fn trickster(answer: fn(&[u8]) -> Vec<u8>) -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 512];
        while let Ok((len, from)) = socket.recv_from(&mut buffer) {
            let query = &buffer[..len];
            let mut forged = answer(query);
            forged[0] ^= 0xff;
            if forged.len() > 3 {
                forged[3] = 0x83;
            }
            let _ = socket.send_to(&forged, from);
            let _ = socket.send_to(&answer(query), from);
        }
    });
    addr
}

/// A NOERROR answer to `query` with its question and no records.
fn empty_answer(query: &[u8]) -> Vec<u8> {
    let mut answer = query.to_vec();
    // QR (response), RD and RA; no additional records (the query's OPT record is dropped).
    answer[2] = 0x81;
    answer[3] = 0x80;
    answer[10] = 0;
    answer[11] = 0;
    let question_end = 12 + answer[12..].iter().position(|b| *b == 0).unwrap() + 1 + 4;
    answer.truncate(question_end);
    answer
}

#[tokio::test]
async fn udp_answers_are_matched_by_id_and_a_closed_port_is_refused() {
    let _shared = crate::support::shared().await;
    let udp = |server, qps| {
        probe_dns(
            dns_spec(server, "probe.test", DnsProtocol::Udp),
            None,
            qps,
            SECOND,
        )
    };
    let only = |m: &Measurement, class: &str| {
        assert_eq!(m.recorder.successes, 0);
        assert!(
            m.recorder.errors.keys().all(|k| k.starts_with(class)),
            "{}",
            errors(m)
        );
    };
    // The NXDOMAIN under another ID is skipped, the answer that follows is taken.
    let m = udp(trickster(empty_answer), 20.0).await;
    assert_eq!(m.recorder.successes, 20, "{}", errors(&m));
    // Our ID on something that is not a DNS message is the server's protocol error.
    let m = udp(trickster(|query| query[..5].to_vec()), 10.0).await;
    only(&m, "protocol");
    // The socket is connected: the port's ICMP answer is a refusal, not a timeout.
    let closed = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let m = udp(closed, 10.0).await;
    only(&m, "refused");
    assert!(m.recorder.response.max() < 100_000, "refused at once");
}

#[tokio::test]
async fn the_agents_dns_test_server_over_udp_tcp_and_tls_with_forwarding() {
    let _shared = crate::support::shared().await;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use kdoctor_agent::agent::start;
    use kdoctor_agent::config::AgentArgs;
    let unbound = Unbound::start();
    let mut args = AgentArgs::ephemeral(vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ]);
    args.dns_server = true;
    args.dns_upstream = Some(([127, 0, 0, 1], unbound.port).into());
    let agent = start(&args).await.expect("agent with DNS test server");
    let [udp, tcp, tls] = &agent.dns;
    for (addrs, protocol) in [
        (udp, DnsProtocol::Udp),
        (tcp, DnsProtocol::Tcp),
        (tls, DnsProtocol::TcpTls),
    ] {
        for addr in addrs {
            let mut spec = dns_spec(*addr, "netdns-e2e-probe.kdoctor.test", protocol);
            spec.record_type = if addr.is_ipv6() {
                RecordType::AAAA
            } else {
                RecordType::A
            };
            let m = probe_dns(spec, None, 20.0, SECOND).await;
            assert_eq!(
                m.recorder.successes,
                20,
                "{addr} {protocol:?}: {}",
                errors(&m)
            );
        }
    }
    assert_eq!(agent.dns_counters.get("netdns-e2e-probe"), 6 * 20);
    // Other names go to the upstream (unbound): answered there, or its NXDOMAIN passed on.
    let m = probe_dns(
        dns_spec(udp[0], "probe.test", DnsProtocol::Udp),
        None,
        10.0,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.successes, 10, "{}", errors(&m));
    let m = probe_dns(
        dns_spec(tcp[0], "missing.test", DnsProtocol::Tcp),
        None,
        10.0,
        SECOND,
    )
    .await;
    assert_eq!(
        m.recorder.rcodes,
        BTreeMap::from([("NXDOMAIN".to_string(), 10)])
    );
}

/// A DNS-over-TCP server like unbound over TLS: no TCP_NODELAY, and the answer in two writes
/// (its length, then the message), so the kernel holds the message until the first write is
/// acknowledged.
fn nagling_server() -> SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut prefix = [0u8; 2];
                if stream.read_exact(&mut prefix).is_err() {
                    return;
                }
                let mut query = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
                if stream.read_exact(&mut query).is_err() {
                    return;
                }
                let answer = empty_answer(&query);
                let length = u16::try_from(answer.len()).unwrap().to_be_bytes();
                let _ = stream.write_all(&length);
                let _ = stream.write_all(&answer);
                // Hold the connection until the client closes it.
                let _ = stream.read(&mut prefix);
            });
        }
    });
    addr
}

/// The prober acknowledges an answer's first bytes at once: a query just sent puts the
/// connection in the kernel's interactive mode, whose delayed ACK (40 ms) would otherwise hold
/// the rest of an answer written without TCP_NODELAY — 40 ms the report would blame on the
/// server (found with unbound over TLS: a p50 of 42.9 ms at 1,000/s).
#[tokio::test]
async fn an_answer_in_two_writes_is_not_held_by_a_delayed_ack() {
    let _shared = crate::support::shared().await;
    let server = nagling_server();
    let m = probe_dns(
        dns_spec(server, "probe.test", DnsProtocol::Tcp),
        None,
        20.0,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.successes, 20, "{}", errors(&m));
    let p50 = m.recorder.response.value_at_quantile(0.5);
    assert!(
        p50 < 20_000,
        "p50 {p50} µs: the answer waited for a delayed ACK"
    );
}

/// A UDP DNS server that queues at most `depth` queries and answers `per_ms` of them each
/// millisecond: asked faster, its queue fills and what arrives then is dropped, as an untuned
/// server's socket does.
fn falling_behind(depth: usize, per_ms: usize) -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let replies = socket.try_clone().unwrap();
    let (queue, queued) = std::sync::mpsc::sync_channel::<(Vec<u8>, SocketAddr)>(depth);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 512];
        while let Ok((len, from)) = socket.recv_from(&mut buffer) {
            // A full queue drops the query.
            let _ = queue.try_send((buffer[..len].to_vec(), from));
        }
    });
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(1));
            for _ in 0..per_ms {
                match queued.try_recv() {
                    Ok((query, from)) => {
                        let _ = replies.send_to(&empty_answer(&query), from);
                    }
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                }
            }
        }
    });
    addr
}

/// A UDP DNS server that answers at once and drops every `nth` query, as a lossy path does.
fn dropping_every(nth: usize) -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 512];
        let mut seen = 0usize;
        while let Ok((len, from)) = socket.recv_from(&mut buffer) {
            seen += 1;
            if !seen.is_multiple_of(nth) {
                let _ = socket.send_to(&empty_answer(&buffer[..len]), from);
            }
        }
    });
    addr
}

#[tokio::test]
async fn a_server_that_falls_behind_is_told_from_a_path_that_loses_queries() {
    let _alone = crate::support::TIMED.write().await;
    let timeout = Duration::from_millis(300);
    // 4,000 queries/s at a server that answers 2,000/s with room for 40 (20 ms of waiting).
    let spec = dns_spec(falling_behind(40, 2), "probe.test", DnsProtocol::Udp);
    let m = probe_dns_within(spec, None, 4000.0, SECOND, timeout).await;
    let timeouts = m.recorder.errors.get("timeout").copied().unwrap_or(0) as u64;
    assert!(timeouts > 500, "the queue never overflowed: {}", errors(&m));
    assert!(
        m.recorder.lost_while_queued * 10 >= timeouts * 9,
        "{} of {timeouts} timeouts seen as the server's queue",
        m.recorder.lost_while_queued
    );
    let reason = kdoctor_agent::report::verdict(&m, None)
        .reason
        .expect("the round fails");
    assert!(reason.contains("the server fell behind"), "{reason}");

    // The same rate at a server that keeps up but whose path loses one query in 20.
    let spec = dns_spec(dropping_every(20), "probe.test", DnsProtocol::Udp);
    let m = probe_dns_within(spec, None, 4000.0, SECOND, timeout).await;
    let timeouts = m.recorder.errors.get("timeout").copied().unwrap_or(0) as u64;
    assert!(timeouts >= 150, "expected one loss in 20: {}", errors(&m));
    assert!(
        m.recorder.lost_while_queued * 10 <= timeouts,
        "{} of {timeouts} random losses taken for the server's queue",
        m.recorder.lost_while_queued
    );
    let reason = kdoctor_agent::report::verdict(&m, None)
        .reason
        .expect("the round fails");
    assert!(!reason.contains("fell behind"), "{reason}");
}
