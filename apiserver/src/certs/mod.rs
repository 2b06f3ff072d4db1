//! The install's certificates managed by the controller itself: the CA Secret created once (or
//! a provided one used), the serving certificate issued under it and renewed before it expires,
//! and the CA injected into the APIService's caBundle (`bootstrap`); when a serving certificate
//! must be issued again (`renewal`, pure).

pub mod bootstrap;
pub mod renewal;
