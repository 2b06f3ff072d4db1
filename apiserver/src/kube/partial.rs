//! `PartialObjectMetadata`: an object's metadata alone, as clients that need no more ask for it
//! (`Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` on a list,
//! `as=PartialObjectMetadata` on a get or a watch). kube-controller-manager's garbage collector
//! and quota controller watch every served resource this way; without it they would be sent
//! every report whole, tens of megabytes each at thousands of nodes, through kube-apiserver.

use serde::Serialize;

/// The kind of one object's metadata.
pub const KIND: &str = "PartialObjectMetadata";
/// The kind of a list of them.
pub const LIST_KIND: &str = "PartialObjectMetadataList";

/// The `meta.k8s.io` version the client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaVersion {
    /// `meta.k8s.io/v1`.
    V1,
    /// `meta.k8s.io/v1beta1` (older clients).
    V1beta1,
}

impl MetaVersion {
    /// `v1` or `v1beta1`; `None` for another.
    pub fn parse(version: Option<&str>) -> Option<MetaVersion> {
        match version {
            Some("v1") => Some(MetaVersion::V1),
            Some("v1beta1") => Some(MetaVersion::V1beta1),
            _ => None,
        }
    }

    /// The objects' `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// One object's metadata as a `PartialObjectMetadata`.
#[derive(Serialize)]
pub struct PartialObject<M> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    metadata: M,
}

impl<M: Serialize> PartialObject<M> {
    /// `metadata` in `version`.
    pub fn new(version: MetaVersion, metadata: M) -> PartialObject<M> {
        PartialObject {
            api_version: version.api_version(),
            kind: KIND,
            metadata,
        }
    }
}
