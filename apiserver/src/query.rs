//! Query strings as Kubernetes clients send them (kube-rs starts with an empty pair: `?&watch=…`).

use std::collections::HashMap;

use crate::status::ApiError;

/// Decoded query parameters (the last value wins, as in Go's `url.Values.Get` for our keys).
#[derive(Clone, Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    /// Parses a raw query string.
    pub fn parse(raw: Option<&str>) -> Result<Query, ApiError> {
        let mut map = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(decode(key)?, decode(value)?);
        }
        Ok(Query(map))
    }

    /// A parameter.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A boolean parameter (`true`/`1`; absent, `false` or `0` is false).
    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None | Some("") | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid value {other:?} for {key}: expected true or false"
            ))),
        }
    }

    /// A non-negative integer parameter.
    pub fn number(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(text) => text.parse::<u64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value {text:?} for {key}: expected a non-negative integer"
                ))
            }),
        }
    }
}

fn decode(text: &str) -> Result<String, ApiError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "invalid percent-encoding in query: {text:?}"
                        ))
                    })?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("query is not UTF-8"))
}
