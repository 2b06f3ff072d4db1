//! Client certificates: a CA bundle that verifies them for client authentication, and the
//! subject fields that name a user (CN = user, O = groups).
//!
//! A connection's chain is verified by a pool once, not on every request (rustls verified it at
//! the handshake, against the verifier of that moment): the verdict is kept with the chain
//! (`PeerCertificates`), by pool, for `VERDICT_TTL`. A new pool (a CA reloaded from the
//! ConfigMap) verifies again; so does the same pool after the TTL, so that a certificate that
//! expires while its connection stays open stops being accepted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

use kdoctor_transport::tls::{TlsError, client_verifier, parse_certs};
use rustls::RootCertStore;

/// A bundle of CA certificates trusted for client certificates.
#[derive(Clone, Debug)]
pub struct CaPool {
    verifier: Arc<dyn ClientCertVerifier>,
    /// How many CA certificates the bundle holds.
    pub len: usize,
    /// Which pool this is, for connections' verdicts: never reused within the process (an
    /// address could be, once a reloaded pool is freed).
    id: u64,
}

/// Pools made so far; the next one's id.
static POOLS: AtomicU64 = AtomicU64::new(1);

/// How long a connection's verdict by one pool stands before it is verified again.
pub const VERDICT_TTL: Duration = Duration::from_secs(10);
/// Verdicts kept per connection: the requestheader and client CA pools, and their successors
/// after a reload.
const MAX_VERDICTS: usize = 4;

/// The client certificate chain of the connection a request came on (leaf first), with what
/// each pool found of it and the leaf's subject: made once per connection, shared by its
/// requests.
#[derive(Clone, Debug, Default)]
pub struct PeerCertificates {
    chain: Arc<Vec<CertificateDer<'static>>>,
    verdicts: Arc<Mutex<Vec<Verdict>>>,
    /// The leaf's subject, read on the first request that needs it.
    subject: Arc<OnceLock<Option<Subject>>>,
}

/// A certificate subject's common name and organizations (user and groups).
type Subject = (String, Vec<String>);

impl PeerCertificates {
    /// A connection's chain, not yet verified by any pool.
    pub fn new(chain: Vec<CertificateDer<'static>>) -> PeerCertificates {
        PeerCertificates {
            chain: Arc::new(chain),
            verdicts: Arc::default(),
            subject: Arc::default(),
        }
    }

    /// The chain, leaf first (empty: the client sent no certificate).
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// The leaf's common name and organizations ([`subject`]), parsed once per connection
    /// rather than on each of its requests; `None` without a leaf or a common name. Whether
    /// the chain is trusted is [`CaPool::verify_once`]'s to say.
    pub fn subject(&self) -> Option<(&str, &[String])> {
        self.subject
            .get_or_init(|| self.chain.first().and_then(subject))
            .as_ref()
            .map(|(cn, orgs)| (cn.as_str(), orgs.as_slice()))
    }
}

#[derive(Debug)]
struct Verdict {
    pool: u64,
    at: Instant,
    result: Result<(), String>,
}

impl CaPool {
    /// A pool from a PEM bundle.
    pub fn from_pem(pem: &[u8]) -> Result<CaPool, TlsError> {
        // As Go's CertPool: certificates that do not parse are skipped, not fatal.
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(parse_certs(pem, "CA bundle")?);
        if added == 0 {
            return Err(TlsError::File {
                path: "CA bundle".to_string(),
                problem: "no usable CA certificate".to_string(),
            });
        }
        let verifier = client_verifier(roots)?;
        Ok(CaPool {
            verifier,
            len: added,
            id: POOLS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// `verify` of a connection's chain, once per connection: what this pool found of it
    /// within `VERDICT_TTL` stands.
    pub fn verify_once(&self, peer: &PeerCertificates) -> Result<(), String> {
        let now = Instant::now();
        let fresh = |v: &Verdict| now.saturating_duration_since(v.at) < VERDICT_TTL;
        {
            // A poisoned lock still holds whole verdicts (each pushed in one step).
            let kept = peer.verdicts.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(v) = kept.iter().find(|v| v.pool == self.id && fresh(v)) {
                return v.result.clone();
            }
        }
        let result = self.verify(&peer.chain);
        let mut kept = peer.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|v| v.pool != self.id && fresh(v));
        if kept.len() >= MAX_VERDICTS {
            kept.remove(0);
        }
        kept.push(Verdict {
            pool: self.id,
            at: now,
            result: result.clone(),
        });
        result
    }

    /// Whether `chain` (leaf first) is a valid client certificate issued by this pool.
    pub fn verify(&self, chain: &[CertificateDer<'static>]) -> Result<(), String> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err("no certificate".into());
        };
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Common name and organizations of a certificate's subject (the same reading as the agent's
/// report API).
pub use kdoctor_transport::tls::subject;

#[cfg(test)]
mod tests {
    use super::*;
    use kdoctor_transport::pki::Ca;

    fn pool(ca: &Ca) -> CaPool {
        CaPool::from_pem(ca.pem.cert.as_bytes()).expect("pool")
    }

    /// A new connection presenting a client certificate of `ca`.
    fn connection(ca: &Ca, user: &str) -> PeerCertificates {
        let pem = ca.client(user, &[]).expect("client certificate");
        PeerCertificates::new(parse_certs(pem.cert.as_bytes(), "test").expect("chain"))
    }

    #[test]
    fn a_verdict_stays_with_its_connection_and_its_pool() {
        let (install, stranger) = (Ca::generate("install").unwrap(), Ca::generate("x").unwrap());
        let trusted = pool(&install);
        let ours = connection(&install, "alice");
        let theirs = connection(&stranger, "mallory");
        assert_eq!(trusted.verify_once(&ours), Ok(()));
        // Another connection's verdict is not this one's, however many requests came first.
        for _ in 0..3 {
            assert!(trusted.verify_once(&theirs).is_err());
            assert_eq!(trusted.verify_once(&ours), Ok(()));
        }
        // A reloaded CA (another pool) judges the same connection afresh.
        let reloaded = pool(&stranger);
        assert!(reloaded.verify_once(&ours).is_err());
        assert_eq!(reloaded.verify_once(&theirs), Ok(()));
        assert_eq!(trusted.verify_once(&ours), Ok(()));
        // A pool made from the same PEM is still another pool.
        assert!(pool(&stranger).verify_once(&ours).is_err());
    }

    #[test]
    fn a_verdict_is_reused_within_its_ttl_and_renewed_after() {
        let (install, stranger) = (Ca::generate("install").unwrap(), Ca::generate("x").unwrap());
        let trusted = pool(&install);
        let theirs = connection(&stranger, "mallory");
        // What was found stands while it is fresh: the chain is not verified again (the
        // verdict is planted to show it)...
        theirs.verdicts.lock().unwrap().push(Verdict {
            pool: trusted.id,
            at: Instant::now(),
            result: Ok(()),
        });
        assert_eq!(trusted.verify_once(&theirs), Ok(()));
        // ...and once it is older than the TTL, the chain is verified again.
        theirs.verdicts.lock().unwrap()[0].at = Instant::now() - VERDICT_TTL;
        assert!(trusted.verify_once(&theirs).is_err());
        assert_eq!(
            theirs.verdicts.lock().unwrap().len(),
            1,
            "the stale verdict replaced"
        );
    }

    #[test]
    fn a_connection_keeps_a_bounded_number_of_verdicts() {
        let install = Ca::generate("install").unwrap();
        let ours = connection(&install, "alice");
        for _ in 0..(MAX_VERDICTS * 3) {
            assert_eq!(pool(&install).verify_once(&ours), Ok(()));
        }
        assert_eq!(ours.verdicts.lock().unwrap().len(), MAX_VERDICTS);
    }
}
