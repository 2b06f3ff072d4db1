//! Query strings as clients send them (kube-rs starts its watch queries with an empty pair).

/// Decoded query parameters, in order.
#[derive(Debug, Clone, Default)]
pub struct Query(pub Vec<(String, String)>);

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    /// Parses `a=b&&c=d`.
    pub fn parse(raw: Option<&str>) -> Self {
        let mut v = Vec::new();
        for pair in raw.unwrap_or("").split('&') {
            if pair.is_empty() {
                continue;
            }
            let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
            v.push((decode(k), decode(val)));
        }
        Query(v)
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `key` is set to a true value (`true`, `1`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerates_empty_pairs_and_decodes() {
        let q = Query::parse(Some(
            "&watch=true&fieldSelector=metadata.name%3Dx&labelSelector=a+in+(b)",
        ));
        assert!(q.flag("watch"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=x"));
        assert_eq!(q.get("labelSelector"), Some("a in (b)"));
        assert_eq!(Query::parse(Some("x=%")).get("x"), Some("%"));
    }
}
