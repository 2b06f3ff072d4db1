//! kdoctor-agent: probe targets, the constant-rate prober, rounds and the report spool.
//!
//! Not built yet (issue 5): this crate deliberately exports nothing.
