//! The install's certificates managed by the controller itself: the CA Secret created once (or
//! a provided one used), the serving certificate issued under it and renewed before it expires,
//! and the CA injected into the APIService's caBundle (`bootstrap`); when a serving certificate
//! must be issued again (`renewal`, pure); and over the process's life (`managed`): issued
//! patiently at start, written where the server reloads them, checked every hour.

pub mod bootstrap;
pub mod managed;
pub mod renewal;
