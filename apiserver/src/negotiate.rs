//! Content negotiation: JSON objects, or a `meta.k8s.io` Table.

use axum::http::{HeaderMap, header};

use crate::status::ApiError;

/// What the client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The objects, as JSON.
    Json,
    /// A Table (`as=Table;g=meta.k8s.io;v=v1` or `v1beta1`).
    Table,
}

/// Picks the first acceptable representation in the client's order.
pub fn negotiate(headers: &HeaderMap) -> Result<Wanted, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.trim().is_empty() {
        return Ok(Wanted::Json);
    }
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        match param("as") {
            None => return Ok(Wanted::Json),
            Some("Table")
                if param("g") == Some("meta.k8s.io")
                    && matches!(param("v"), Some("v1" | "v1beta1")) =>
            {
                return Ok(Wanted::Table);
            }
            // Another kind of view (e.g. PartialObjectMetadataList): try the next entry.
            Some(_) => continue,
        }
    }
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io (got {accept:?})"
    )))
}

/// Whether the client takes a gzip-encoded body (`Accept-Encoding: gzip` or `*`, not `q=0`).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|entry| {
            let mut parts = entry.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("").to_ascii_lowercase();
            let refused = parts.any(|p| {
                p.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("q")
                        && v.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
                })
            });
            matches!(coding.as_str(), "gzip" | "*") && !refused
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_encoding(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(value).expect("header"),
        );
        headers
    }

    #[test]
    fn gzip_is_taken_unless_refused_with_q_zero() {
        assert!(accepts_gzip(&with_encoding("gzip")));
        assert!(accepts_gzip(&with_encoding("deflate, GZIP;q=0.5")));
        assert!(accepts_gzip(&with_encoding("*")));
        assert!(!accepts_gzip(&with_encoding("gzip;q=0")));
        assert!(!accepts_gzip(&with_encoding("br, identity")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
