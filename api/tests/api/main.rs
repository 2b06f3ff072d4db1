//! The kdoctor-api test suite (one binary): validation rules, defaults, schedule maths, CRD
#![recursion_limit = "256"]
//! schema and CEL rules, report shapes and the configuration file.

mod config;
mod crd;
mod defaults;
mod examples;
mod invalid;
mod report;
mod schedule;
mod support;
mod update;
