//! kdoctor-api: the data model of kdoctor — task CRDs (`kdoctor.io/v1beta1`), the
//! `KdoctorReport` (`system.kdoctor.io/v1beta1`), defaults, validation, schedule maths and the
//! configuration file. Pure: nothing here does IO.

pub mod config;
pub mod crd;
pub mod defaults;
pub mod document;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod go_duration;
pub mod inputs;
pub mod labels;
pub mod matrix;
pub mod naming;
pub mod report;
pub mod schedule;
pub mod task;
pub mod validation;
