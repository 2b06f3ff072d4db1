//! Reading what the kernel attaches to a received datagram (`recvmsg(2)` control messages):
//! the TTL or hop limit it arrived with and the kernel's receive time. Pure: it walks the
//! bytes of the control buffer as the kernel lays them out (`struct cmsghdr`, a `size_t`
//! length, then level and type, each message aligned to `size_t`).

use std::mem::size_of;

/// What the control messages of one datagram said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// IPv4 TTL or IPv6 hop limit on arrival.
    pub ttl: Option<u8>,
    /// Kernel receive time, nanoseconds since the Unix epoch (`SO_TIMESTAMPNS`).
    pub kernel_time_ns: Option<u64>,
}

/// The (level, type) pairs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds {
    /// `IPPROTO_IP`, `IP_TTL`.
    pub ipv4_ttl: (i32, i32),
    /// `IPPROTO_IPV6`, `IPV6_HOPLIMIT`.
    pub ipv6_hop_limit: (i32, i32),
    /// `SOL_SOCKET`, `SCM_TIMESTAMPNS`.
    pub timestamp_ns: (i32, i32),
}

/// This platform's values.
pub const KINDS: Kinds = Kinds {
    ipv4_ttl: (libc::IPPROTO_IP, libc::IP_TTL),
    ipv6_hop_limit: (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT),
    timestamp_ns: (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS),
};

const WORD: usize = size_of::<usize>();

fn align(n: usize) -> usize {
    n.div_ceil(WORD) * WORD
}

fn word(bytes: &[u8]) -> Option<usize> {
    Some(usize::from_ne_bytes(bytes.get(..WORD)?.try_into().ok()?))
}

fn int(bytes: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?))
}

fn long(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_ne_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// Reads the control messages in `control` (the `msg_controllen` bytes the kernel filled).
/// Messages it does not know and truncated ones are skipped.
pub fn parse(control: &[u8], kinds: &Kinds) -> Received {
    let header = align(WORD + 8);
    let mut received = Received::default();
    let mut at = 0;
    while let Some(rest) = control.get(at..) {
        let (Some(len), Some(level), Some(kind)) = (
            word(rest),
            rest.get(WORD..).and_then(int),
            rest.get(WORD + 4..).and_then(int),
        ) else {
            break;
        };
        if len < header || len > rest.len() {
            break;
        }
        let data = &rest[header..len];
        let pair = (level, kind);
        if pair == kinds.ipv4_ttl || pair == kinds.ipv6_hop_limit {
            received.ttl = int(data).and_then(|t| u8::try_from(t).ok());
        } else if pair == kinds.timestamp_ns {
            // struct timespec: two longs on the 64-bit platforms the agent is built for.
            let secs = long(data).and_then(|s| u64::try_from(s).ok());
            let nanos = data
                .get(8..)
                .and_then(long)
                .and_then(|n| u64::try_from(n).ok());
            if let (Some(secs), Some(nanos)) = (secs, nanos) {
                received.kernel_time_ns = secs
                    .checked_mul(1_000_000_000)
                    .and_then(|n| n.checked_add(nanos));
            }
        }
        at += align(len);
    }
    received
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let header = align(WORD + 8);
        let len = header + data.len();
        let mut out = Vec::new();
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&level.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.resize(header, 0);
        out.extend_from_slice(data);
        out.resize(align(len), 0);
        out
    }

    #[test]
    fn ttl_hop_limit_and_kernel_time_are_read_and_unknown_messages_skipped() {
        let mut control = message(99, 1, &[1, 2, 3]);
        control.extend(message(
            KINDS.ipv4_ttl.0,
            KINDS.ipv4_ttl.1,
            &61i32.to_ne_bytes(),
        ));
        let mut timespec = 1_700_000_000i64.to_ne_bytes().to_vec();
        timespec.extend_from_slice(&250i64.to_ne_bytes());
        control.extend(message(
            KINDS.timestamp_ns.0,
            KINDS.timestamp_ns.1,
            &timespec,
        ));
        assert_eq!(
            parse(&control, &KINDS),
            Received {
                ttl: Some(61),
                kernel_time_ns: Some(1_700_000_000_000_000_250),
            }
        );
        let v6 = message(
            KINDS.ipv6_hop_limit.0,
            KINDS.ipv6_hop_limit.1,
            &63i32.to_ne_bytes(),
        );
        assert_eq!(parse(&v6, &KINDS).ttl, Some(63));
    }

    #[test]
    fn a_truncated_or_lying_buffer_reads_as_nothing_more() {
        let whole = message(KINDS.ipv4_ttl.0, KINDS.ipv4_ttl.1, &61i32.to_ne_bytes());
        for cut in 0..whole.len() - 4 {
            assert_eq!(parse(&whole[..cut], &KINDS).ttl, None, "cut at {cut}");
        }
        let mut lying = whole.clone();
        lying[..WORD].copy_from_slice(&usize::MAX.to_ne_bytes());
        assert_eq!(parse(&lying, &KINDS), Received::default());
        let mut zero = whole;
        zero[..WORD].copy_from_slice(&0usize.to_ne_bytes());
        assert_eq!(parse(&zero, &KINDS), Received::default());
    }
}
