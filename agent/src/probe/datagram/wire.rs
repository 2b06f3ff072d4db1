//! The UDP echo datagram: what a prober sends and an agent's echo port returns. Pure.
//!
//! ```text
//!  0..4   magic "KDUE"
//!  4      version (1)
//!  5      kind: 0 request, 1 echo
//!  6      TTL or hop limit the echo port read on the request (0: unknown)
//!  7      reserved (0)
//!  8..16  stream: a random number per prober, so that echoes of another run are told apart
//! 16..24  sequence number
//! 24..32  the prober's send time, nanoseconds on its own clock (opaque to the echo port)
//! 32..40  the echo port's receive time, nanoseconds on its own clock (0 in a request)
//! 40..    zero padding up to the request's size; the echo is the same size
//! ```
//!
//! ICMP echo requests carry the same header as their payload, which the reply returns as it
//! is (a request).
//!
//! Only requests are echoed, so two echo ports cannot be made to bounce a datagram between
//! each other, and an echo is never larger than its request (no amplification).

/// Identifies a kdoctor echo datagram.
pub const MAGIC: [u8; 4] = *b"KDUE";
/// The version this build speaks.
pub const VERSION: u8 = 1;
/// The smallest datagram: the header.
pub const HEADER_BYTES: usize = 40;
/// The largest datagram an IPv4 UDP payload can be.
pub const MAX_BYTES: usize = 65_507;

const KIND_REQUEST: u8 = 0;
const KIND_ECHO: u8 = 1;

/// A request as the prober fills it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The prober's stream.
    pub stream: u64,
    /// The sequence number.
    pub seq: u64,
    /// The prober's send time (ns).
    pub sent_ns: u64,
}

/// An echo as the prober reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Echo {
    /// The request it echoes.
    pub request: Request,
    /// TTL or hop limit the echo port read on the request.
    pub ttl: Option<u8>,
    /// The echo port's receive time (ns, its own clock).
    pub received_ns: u64,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(word)
}

impl Request {
    /// Writes the request into `buf` (the datagram is all of it; its length is the size
    /// probed, at least [`HEADER_BYTES`]). Returns `false` when `buf` is shorter.
    pub fn write(&self, buf: &mut [u8]) -> bool {
        if buf.len() < HEADER_BYTES {
            return false;
        }
        buf[..4].copy_from_slice(&MAGIC);
        buf[4] = VERSION;
        buf[5] = KIND_REQUEST;
        buf[6] = 0;
        buf[7] = 0;
        buf[8..16].copy_from_slice(&self.stream.to_be_bytes());
        buf[16..24].copy_from_slice(&self.seq.to_be_bytes());
        buf[24..32].copy_from_slice(&self.sent_ns.to_be_bytes());
        buf[32..].fill(0);
        true
    }
}

fn header(datagram: &[u8], kind: u8) -> bool {
    datagram.len() >= HEADER_BYTES
        && datagram.len() <= MAX_BYTES
        && datagram[..4] == MAGIC
        && datagram[4] == VERSION
        && datagram[5] == kind
}

/// Turns a received request into its echo in place: `false` (and nothing changed) when the
/// datagram is not a request of this version, which the echo port drops.
pub fn make_echo(datagram: &mut [u8], ttl: Option<u8>, received_ns: u64) -> bool {
    if !header(datagram, KIND_REQUEST) {
        return false;
    }
    datagram[5] = KIND_ECHO;
    datagram[6] = ttl.unwrap_or(0);
    datagram[32..40].copy_from_slice(&received_ns.to_be_bytes());
    true
}

/// Reads a request (what an ICMP echo reply carries back unchanged); `None` for anything else.
pub fn read_request(datagram: &[u8]) -> Option<Request> {
    if !header(datagram, KIND_REQUEST) {
        return None;
    }
    Some(Request {
        stream: u64_at(datagram, 8),
        seq: u64_at(datagram, 16),
        sent_ns: u64_at(datagram, 24),
    })
}

/// Reads an echo; `None` for anything else.
pub fn read_echo(datagram: &[u8]) -> Option<Echo> {
    if !header(datagram, KIND_ECHO) {
        return None;
    }
    Some(Echo {
        request: Request {
            stream: u64_at(datagram, 8),
            seq: u64_at(datagram, 16),
            sent_ns: u64_at(datagram, 24),
        },
        ttl: (datagram[6] != 0).then_some(datagram[6]),
        received_ns: u64_at(datagram, 32),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_becomes_an_echo_of_the_same_size_that_reads_back() {
        let request = Request {
            stream: 7,
            seq: 42,
            sent_ns: 1_000,
        };
        let mut datagram = vec![0xffu8; 100];
        assert!(request.write(&mut datagram));
        assert!(datagram[40..].iter().all(|b| *b == 0), "padding is zeroed");
        assert_eq!(read_echo(&datagram), None, "a request is not an echo");
        assert_eq!(read_request(&datagram), Some(request));
        assert!(make_echo(&mut datagram, Some(62), 5_000));
        assert_eq!(datagram.len(), 100);
        assert_eq!(
            read_echo(&datagram),
            Some(Echo {
                request,
                ttl: Some(62),
                received_ns: 5_000
            })
        );
        // An echo is never echoed again: two echo ports cannot bounce it between them.
        assert!(!make_echo(&mut datagram, None, 6_000));
    }

    #[test]
    fn short_foreign_and_other_version_datagrams_are_refused() {
        assert!(
            !Request {
                stream: 1,
                seq: 1,
                sent_ns: 1
            }
            .write(&mut [0u8; HEADER_BYTES - 1])
        );
        let mut short = *b"KDUE\x01\x00";
        assert!(!make_echo(&mut short, None, 1));
        let mut foreign = [0u8; 64];
        assert!(!make_echo(&mut foreign, None, 1));
        let mut datagram = [0u8; HEADER_BYTES];
        Request {
            stream: 1,
            seq: 1,
            sent_ns: 1,
        }
        .write(&mut datagram);
        datagram[4] = VERSION + 1;
        assert!(!make_echo(&mut datagram, None, 1));
    }
}
