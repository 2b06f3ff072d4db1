//! kdoctor-reconciler: task controllers, carriers, rounds, harvest and clean-up.
//!
//! Not built yet (issue 7): this crate deliberately exports nothing.
