//! Checks of addresses written in task specs: URLs, host names, DNS names.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Checks an AppHttpHealthy `host` (after the `http://` default): an http or https URL whose
/// host is a domain name, an IPv4 address or a bracketed IPv6 address.
pub(super) fn check_http_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("must be a URL such as http://example.com:8080/path ({e})"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err("scheme must be http or https".to_string()),
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or("must name a host")?;
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or("IPv6 addresses must be bracketed: http://[ipv6]:port")?;
        return inner
            .parse::<Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| format!("{inner:?} is not an IPv6 address"));
    }
    // Upstream's rule: a dotted host is a domain name (with an alphabetic top-level label) or
    // an IPv4 address; a single label (a Service name, "localhost") is accepted as is.
    if host.contains('.') && !is_domain_with_tld(host) && host.parse::<Ipv4Addr>().is_err() {
        return Err(format!(
            "{host:?} is neither a domain name nor an IPv4 address"
        ));
    }
    Ok(())
}

/// Upstream's `^[a-zA-Z0-9_-]+(\.[a-zA-Z0-9_-]+)*\.[a-zA-Z]{2,}$`.
fn is_domain_with_tld(host: &str) -> bool {
    let labels: Vec<&str> = host.split('.').collect();
    let Some((tld, rest)) = labels.split_last() else {
        return false;
    };
    !rest.is_empty()
        && tld.len() >= 2
        && tld.bytes().all(|b| b.is_ascii_alphabetic())
        && rest.iter().all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// A DNS name to query: labels of 1–63 letters, digits, `-` or `_`, at most 253 characters,
/// with an optional trailing dot.
pub(super) fn is_dns_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// A DNS server: an IP address or a host name.
pub(super) fn is_server_address(server: &str) -> bool {
    server.parse::<std::net::IpAddr>().is_ok() || is_dns_name(server)
}
