//! Query strings as Kubernetes clients send them (kube-rs starts with an empty pair: `?&watch=…`).
//!
//! Authorization ([`crate::metrics::RequestInfo`]) and the handlers read the query through this
//! one parser, so a request is authorized as exactly what it is served as: `?wat%63h=true` is a
//! watch for both, and of `watch=true&watch=false` both take the first value, as the Go server
//! does (`url.Values` and its parameter codec read `values[0]`).

use std::collections::HashMap;

use crate::kube::status::ApiError;

/// Decoded query parameters (the first value of a repeated key wins).
#[derive(Clone, Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    /// Parses a raw query string (`application/x-www-form-urlencoded`: `+` is a space, `%XX`
    /// a byte; malformed escapes stay literal, as Go's decoder keeps them out of any key we read).
    pub fn parse(raw: Option<&str>) -> Query {
        let mut map = HashMap::new();
        for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            map.entry(key.into_owned())
                .or_insert_with(|| value.into_owned());
        }
        Query(map)
    }

    /// A parameter.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A boolean parameter (`true`/`1`, any case; absent, empty, `false` or `0` is false).
    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None | Some("") | Some("0") => Ok(false),
            Some("1") => Ok(true),
            Some(text) if text.eq_ignore_ascii_case("false") => Ok(false),
            Some(text) if text.eq_ignore_ascii_case("true") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid value {other:?} for {key}: expected true or false"
            ))),
        }
    }

    /// Whether the request asks for a watch (a malformed value is no watch; the handler then
    /// answers 400 for it).
    pub fn watching(&self) -> bool {
        self.flag("watch").unwrap_or(false)
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

#[cfg(test)]
mod tests {
    use super::Query;

    #[test]
    fn encoded_keys_and_values_decode_once() {
        for raw in ["watch=%74rue", "wat%63h=true", "watch=TRUE", "&watch=1"] {
            assert!(Query::parse(Some(raw)).watching(), "{raw}");
        }
        let q = Query::parse(Some("labelSelector=a%3Db+c&fieldSelector=x%2By"));
        assert_eq!(q.get("labelSelector"), Some("a=b c"));
        assert_eq!(q.get("fieldSelector"), Some("x+y"));
    }

    #[test]
    fn the_first_of_repeated_keys_wins() {
        let q = Query::parse(Some("watch=true&watch=false"));
        assert!(q.watching());
        let q = Query::parse(Some("watch=false&watch=true"));
        assert!(!q.watching());
    }

    #[test]
    fn a_malformed_flag_is_an_error_for_the_handler_and_no_watch() {
        let q = Query::parse(Some("watch=yes&limit=%zz"));
        assert!(q.flag("watch").is_err());
        assert!(!q.watching());
        assert!(q.number("limit").is_err());
    }
}
