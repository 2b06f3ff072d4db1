//! The kdoctor-reconciler test suite (one binary).

mod rounds;
