//! Content negotiation: JSON objects, a `meta.k8s.io` Table, their metadata alone
//! (`PartialObjectMetadata`), or (for one report) its connectivity matrix.

use axum::http::{HeaderMap, header};

use crate::kube::partial::{self, MetaVersion};
use crate::kube::status::ApiError;

/// What the client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The objects, as JSON.
    Json,
    /// A Table (`as=Table;g=meta.k8s.io;v=v1` or `v1beta1`).
    Table,
    /// Their metadata alone (`as=PartialObjectMetadata` for one object or a watch,
    /// `as=PartialObjectMetadataList` for a list; `g=meta.k8s.io`, `v=v1` or `v1beta1`).
    Metadata(MetaVersion),
}

/// What a request reads: which `PartialObjectMetadata` kind it may be answered with, as
/// kube-apiserver decides (a list's is the List kind; a watch's events carry single objects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// A list.
    List,
    /// A watch.
    Watch,
    /// One object.
    One,
}

impl Reading {
    /// A request to a collection: a watch when `watch` is set, else a list.
    pub fn collection(watch: bool) -> Reading {
        if watch { Reading::Watch } else { Reading::List }
    }

    fn partial_kind(self) -> &'static str {
        match self {
            Reading::List => partial::LIST_KIND,
            Reading::Watch | Reading::One => partial::KIND,
        }
    }
}

/// What the client asked for of one KdoctorReport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectView {
    /// The object or its Table row.
    Plain(Wanted),
    /// The connectivity matrix of its round
    /// (`as=KdoctorReportMatrix;g=system.kdoctor.io;v=v1beta1`).
    Matrix,
}

/// Picks the first acceptable representation in the client's order for what it reads.
pub fn negotiate(headers: &HeaderMap, reading: Reading) -> Result<Wanted, ApiError> {
    match choose(headers, reading, false)? {
        ObjectView::Plain(wanted) => Ok(wanted),
        ObjectView::Matrix => Err(ApiError::not_acceptable(MATRIX_ONLY_ON_GET.to_string())),
    }
}

/// As [`negotiate`], for a GET of one report, which may also be asked for as a matrix.
pub fn negotiate_object(headers: &HeaderMap) -> Result<ObjectView, ApiError> {
    choose(headers, Reading::One, true)
}

const MATRIX_ONLY_ON_GET: &str =
    "the KdoctorReportMatrix view is served for a GET of one kdoctorreport only";

fn choose(headers: &HeaderMap, reading: Reading, matrix: bool) -> Result<ObjectView, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.trim().is_empty() {
        return Ok(ObjectView::Plain(Wanted::Json));
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
            None => return Ok(ObjectView::Plain(Wanted::Json)),
            Some("Table")
                if param("g") == Some("meta.k8s.io")
                    && matches!(param("v"), Some("v1" | "v1beta1")) =>
            {
                return Ok(ObjectView::Plain(Wanted::Table));
            }
            Some(kind) if kind == reading.partial_kind() && param("g") == Some("meta.k8s.io") => {
                match MetaVersion::parse(param("v")) {
                    Some(version) => return Ok(ObjectView::Plain(Wanted::Metadata(version))),
                    None => continue,
                }
            }
            Some(kind)
                if matrix
                    && kind == kdoctor_api::matrix::KIND
                    && param("g") == Some(crate::kube::group::GROUP)
                    && param("v") == Some(crate::kube::group::VERSION) =>
            {
                return Ok(ObjectView::Matrix);
            }
            // Another kind of view (e.g. PartialObjectMetadataList): try the next entry.
            Some(_) => continue,
        }
    }
    let matrix_too = if matrix {
        ", application/json;as=KdoctorReportMatrix;v=v1beta1;g=system.kdoctor.io"
    } else {
        ""
    };
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as={};v=v1;g=meta.k8s.io{matrix_too} (got {accept:?})",
        reading.partial_kind()
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

    fn accepting(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_str(value).expect("header"),
        );
        headers
    }

    #[test]
    fn the_matrix_view_is_chosen_only_for_one_object_and_only_when_named_fully() {
        let matrix = "application/json;as=KdoctorReportMatrix;g=system.kdoctor.io;v=v1beta1";
        assert_eq!(
            negotiate_object(&accepting(matrix)).expect("ok"),
            ObjectView::Matrix
        );
        assert_eq!(
            negotiate_object(&accepting(&format!("{matrix}, application/json"))).expect("ok"),
            ObjectView::Matrix
        );
        // A list or watch cannot be a matrix: a client that offers JSON too gets JSON.
        assert_eq!(
            negotiate(
                &accepting(&format!("{matrix}, application/json")),
                Reading::List
            )
            .expect("ok"),
            Wanted::Json
        );
        assert!(negotiate(&accepting(matrix), Reading::One).is_err());
        // The wrong group is another view.
        let other = "application/json;as=KdoctorReportMatrix;g=example.com;v=v1beta1";
        assert!(negotiate_object(&accepting(other)).is_err());
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
