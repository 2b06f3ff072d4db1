//! kdoctor-transport: what crosses between kdoctor's processes, in one small crate that agent,
//! controller and binary share without depending on each other — the install's PKI (`pki`), the
//! TLS material and configurations (rustls with ring), and the report API's contract: the listed entry, the
//! harvester's certificate name, and the client the harvester pulls with. The agent serves the
//! report API; the controller only speaks this contract, so it does not build the probers. Also
//! the threads that connections are served and probed from (`runtime_threads`), and glibc's
//! malloc arenas sized to them (`malloc_arenas`), and what bounds every server's clients (`limits`,
//! `first_bytes`, `accept`).

pub mod accept;
pub mod connect;
pub mod first_bytes;
pub mod limits;
pub mod malloc_arenas;
pub mod pki;
pub mod report_api;
pub mod report_client;
pub mod runtime_threads;
pub mod tls;
