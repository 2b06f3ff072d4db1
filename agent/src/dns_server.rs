//! The app-mode DNS test server (upstream §14.3): UDP, TCP and DNS over TLS. Names whose first
//! label starts with `netdns-e2e` are answered (A 127.0.0.1, AAAA ::1, TTL 3600) and counted
//! under that label; other queries are forwarded over UDP to an upstream server when one is
//! configured, and refused otherwise.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use kdoctor_transport::accept::{accept_loop, handshake};
use kdoctor_transport::limits::ServeLimits;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// Prefix of the names the server answers itself.
pub const TEST_PREFIX: &str = "netdns-e2e";
/// TTL of its answers.
pub const TTL: u32 = 3600;
/// How long a forwarded query may take.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);
/// Most distinct counters kept.
pub const MAX_COUNTERS: usize = 10_000;
/// Most forwarded UDP queries waiting for the upstream at once: each holds a task and a
/// socket for up to [`FORWARD_TIMEOUT`], so a flood of names to forward would otherwise grow
/// both without bound. Beyond it a query is dropped.
pub const MAX_FORWARDS_IN_FLIGHT: usize = 256;
/// A TCP or DoT client that sends nothing for this long is disconnected.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Query counters by first label, shared by the three listeners.
#[derive(Clone, Default)]
pub struct Counters(Arc<Mutex<HashMap<String, u64>>>);

impl Counters {
    /// The count of `label` (0 when never queried).
    pub fn get(&self, label: &str) -> u64 {
        self.lock().get(label).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        // Only counters inside: a poisoned lock still holds usable ones.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn increment(&self, label: &str) {
        let mut counters = self.lock();
        if let Some(n) = counters.get_mut(label) {
            *n += 1;
        } else if counters.len() < MAX_COUNTERS {
            counters.insert(label.to_string(), 1);
        }
    }
}

/// What the server does with one query message.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// Send these bytes back.
    Reply(Vec<u8>),
    /// Forward the query upstream.
    Forward,
    /// Nothing to send (the bytes were not a DNS query).
    Drop,
}

/// Answers one query (pure: no IO), counting test names in `counters`.
pub fn answer(query: &[u8], counters: &Counters, can_forward: bool) -> Answer {
    let Ok(request) = Message::from_vec(query) else {
        return Answer::Drop;
    };
    if request.metadata.message_type != MessageType::Query {
        return Answer::Drop;
    }
    let id = request.metadata.id;
    let op_code = request.metadata.op_code;
    let reply = |mut message: Message| {
        message.metadata.recursion_desired = request.metadata.recursion_desired;
        message.add_queries(request.queries.clone());
        match message.to_vec() {
            Ok(bytes) => Answer::Reply(bytes),
            Err(_) => Answer::Drop,
        }
    };
    let Some(question) = request.queries.first() else {
        return reply(Message::error_msg(id, op_code, ResponseCode::FormErr));
    };
    if op_code != OpCode::Query {
        return reply(Message::error_msg(id, op_code, ResponseCode::NotImp));
    }
    let name = question.name();
    let first = name
        .iter()
        .next()
        .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
        .unwrap_or_default();
    if !first.starts_with(TEST_PREFIX) {
        return if can_forward {
            Answer::Forward
        } else {
            reply(Message::error_msg(id, op_code, ResponseCode::Refused))
        };
    }
    counters.increment(&first);
    let mut message = Message::response(id, op_code);
    message.metadata.authoritative = true;
    match question.query_type() {
        RecordType::A => {
            message.add_answer(Record::from_rdata(
                name.clone(),
                TTL,
                RData::A(A(Ipv4Addr::LOCALHOST)),
            ));
        }
        RecordType::AAAA => {
            message.add_answer(Record::from_rdata(
                name.clone(),
                TTL,
                RData::AAAA(AAAA(Ipv6Addr::LOCALHOST)),
            ));
        }
        // The name exists with no data of other types (NODATA).
        _ => {}
    }
    reply(message)
}

async fn forward(query: &[u8], upstream: SocketAddr) -> Option<Vec<u8>> {
    let bind: SocketAddr = if upstream.is_ipv6() {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(bind).await.ok()?;
    socket.connect(upstream).await.ok()?;
    socket.send(query).await.ok()?;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(FORWARD_TIMEOUT, socket.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf.truncate(n);
    Some(buf)
}

async fn respond(
    query: &[u8],
    counters: &Counters,
    upstream: Option<SocketAddr>,
) -> Option<Vec<u8>> {
    match answer(query, counters, upstream.is_some()) {
        Answer::Reply(bytes) => Some(bytes),
        Answer::Forward => forward(query, upstream?).await,
        Answer::Drop => None,
    }
}

/// Serves queries on a UDP socket until aborted. Test names are answered in the receive loop;
/// only forwards, which wait for the upstream, get a task each, at most
/// [`MAX_FORWARDS_IN_FLIGHT`] at once.
pub fn serve_udp(
    socket: UdpSocket,
    counters: Counters,
    upstream: Option<SocketAddr>,
) -> JoinHandle<()> {
    let socket = Arc::new(socket);
    let forwards = Arc::new(Semaphore::new(MAX_FORWARDS_IN_FLIGHT));
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            match answer(&buf[..n], &counters, upstream.is_some()) {
                Answer::Reply(reply) => {
                    let _ = socket.send_to(&reply, peer).await;
                }
                Answer::Drop => {}
                Answer::Forward => {
                    let (Some(upstream), Ok(permit)) =
                        (upstream, forwards.clone().try_acquire_owned())
                    else {
                        // Busy: dropped, as an overloaded server does; the client retries.
                        continue;
                    };
                    let query = buf[..n].to_vec();
                    let socket = socket.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        if let Some(reply) = forward(&query, upstream).await {
                            let _ = socket.send_to(&reply, peer).await;
                        }
                    });
                }
            }
        }
    })
}

/// Serves length-prefixed queries (RFC 1035 §4.2.2) on one stream until it closes, is idle for
/// [`IDLE_TIMEOUT`], or takes longer than `query_timeout` to send a query it began.
async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    counters: Counters,
    upstream: Option<SocketAddr>,
    query_timeout: Duration,
) {
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(IDLE_TIMEOUT, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let mut query = vec![0u8; u16::from_be_bytes(len) as usize];
        match tokio::time::timeout(query_timeout, stream.read_exact(&mut query)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let Some(reply) = respond(&query, &counters, upstream).await else {
            continue;
        };
        let Ok(n) = u16::try_from(reply.len()) else {
            continue;
        };
        if stream.write_all(&n.to_be_bytes()).await.is_err()
            || stream.write_all(&reply).await.is_err()
        {
            return;
        }
    }
}

/// Serves TCP (or, with `tls`, DNS over TLS) until aborted, within `limits`: at most
/// `max_connections` at once, the handshake's deadline, and `header_timeout` for the rest of a
/// query once its length arrived.
pub fn serve_tcp(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    counters: Counters,
    upstream: Option<SocketAddr>,
    limits: ServeLimits,
) -> JoinHandle<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    tokio::spawn(accept_loop(
        listener,
        limits,
        "DNS test server",
        move |stream, _| {
            let counters = counters.clone();
            let acceptor = acceptor.clone();
            async move {
                let query_timeout = limits.header_timeout;
                match acceptor {
                    None => serve_stream(stream, counters, upstream, query_timeout).await,
                    Some(acceptor) => {
                        if let Ok(tls) = handshake(&acceptor, stream, &limits).await {
                            serve_stream(tls, counters, upstream, query_timeout).await;
                        }
                    }
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;

    fn query(name: &str, record_type: RecordType) -> Vec<u8> {
        let mut m = Message::query();
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), record_type));
        m.to_vec().unwrap()
    }

    fn reply(answer: Answer) -> Message {
        match answer {
            Answer::Reply(bytes) => Message::from_vec(&bytes).unwrap(),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn udp_forwards_are_bounded_and_test_names_answered_while_they_wait() {
        // An upstream that never answers: every forward holds its slot for FORWARD_TIMEOUT.
        let upstream = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let serving = serve_udp(
            server,
            Counters::default(),
            Some(upstream.local_addr().unwrap()),
        );
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.connect(addr).await.unwrap();
        let flood = MAX_FORWARDS_IN_FLIGHT + 100;
        for i in 0..flood {
            let q = query(&format!("host-{i}.example."), RecordType::A);
            client.send(&q).await.unwrap();
        }
        let mut forwarded = 0;
        let mut buf = [0u8; 512];
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(500), upstream.recv(&mut buf)).await
        {
            forwarded += 1;
        }
        assert_eq!(
            forwarded, MAX_FORWARDS_IN_FLIGHT,
            "{flood} names to forward, the upstream silent"
        );
        // The test names do not wait behind the forwards.
        client
            .send(&query("netdns-e2e-a.example.", RecordType::A))
            .await
            .unwrap();
        let n = tokio::time::timeout(Duration::from_secs(1), client.recv(&mut buf))
            .await
            .expect("answered while every forward slot is taken")
            .unwrap();
        assert_eq!(Message::from_vec(&buf[..n]).unwrap().answers.len(), 1);
        serving.abort();
    }

    #[test]
    fn test_names_are_answered_and_counted() {
        let counters = Counters::default();
        let m = reply(answer(
            &query("netdns-e2e-x.example.", RecordType::A),
            &counters,
            false,
        ));
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].data, RData::A(A(Ipv4Addr::LOCALHOST)));
        assert_eq!(m.answers[0].ttl, TTL);
        let m = reply(answer(
            &query("NETDNS-E2E-x.example.", RecordType::AAAA),
            &counters,
            false,
        ));
        assert_eq!(m.answers[0].data, RData::AAAA(AAAA(Ipv6Addr::LOCALHOST)));
        assert_eq!(counters.get("netdns-e2e-x"), 2);
        let m = reply(answer(
            &query("netdns-e2e.", RecordType::TXT),
            &counters,
            false,
        ));
        assert_eq!(
            (m.metadata.response_code, m.answers.len()),
            (ResponseCode::NoError, 0)
        );
    }

    #[test]
    fn other_names_are_forwarded_or_refused() {
        let counters = Counters::default();
        assert_eq!(
            answer(&query("example.com.", RecordType::A), &counters, true),
            Answer::Forward
        );
        let m = reply(answer(
            &query("example.com.", RecordType::A),
            &counters,
            false,
        ));
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
        assert_eq!(answer(b"garbage", &counters, false), Answer::Drop);
    }
}
