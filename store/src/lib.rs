//! kdoctor-store: the embedded report store of the controller.
//!
//! Not built yet (issue 3): this crate deliberately exports nothing, so that no other crate can
//! depend on behaviour that does not exist.
