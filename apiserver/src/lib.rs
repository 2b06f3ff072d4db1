//! kdoctor-apiserver: the aggregated API server for `system.kdoctor.io/v1beta1` KdoctorReport.
//!
//! Not built yet (issue 4): this crate deliberately exports nothing.
