//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the holder renews
//! the Lease every `renew`; another replica takes it over only once it has not been renewed for
//! `lease_duration`. Writes are conditional on the resourceVersion, so two replicas never both
//! win. A leader that cannot renew in time gives up (the caller stops acting).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;

/// Timing of the election.
#[derive(Clone, Debug)]
pub struct LeaseTiming {
    /// How long a Lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How often the holder renews (and candidates retry).
    pub renew: Duration,
}

impl Default for LeaseTiming {
    /// A 15 s Lease (client-go's default) renewed every 5 s: a failed-over controller resumes
    /// within about 20 s, with one Lease write per 5 s.
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew: Duration::from_secs(5),
        }
    }
}

/// One replica's candidacy.
#[derive(Clone)]
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: LeaseTiming,
    /// Written on the Lease by its holder (where followers reach it).
    annotations: BTreeMap<String, String>,
    /// Whether this candidate should leave the Lease to another for now (its data is not the
    /// newest); it takes the Lease anyway after a few deferrals.
    defer: Option<Deferral>,
}

/// Decides, from the Lease as it is, whether a candidate leaves it to another replica for now.
pub type Deferral = std::sync::Arc<dyn Fn(&Lease) -> bool + Send + Sync>;

/// Expired Leases a candidate that is behind leaves to the others before taking one.
const DEFERRALS: u32 = 3;

/// What one attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease.
    Leading,
    /// Another replica holds it.
    Following(String),
}

fn micro(t: Timestamp) -> MicroTime {
    MicroTime(t)
}

impl Elector {
    /// A candidate `identity` (usually the pod name) for Lease `namespace/name`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: LeaseTiming,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            annotations: BTreeMap::new(),
            defer: None,
        }
    }

    /// Writes `key: value` on the Lease while this replica holds it.
    pub fn annotate(mut self, key: &str, value: &str) -> Elector {
        self.annotations.insert(key.to_string(), value.to_string());
        self
    }

    /// Leaves the Lease to other candidates while `defer` says so (at most a few times in a
    /// row, so that an election always ends).
    pub fn defer_while(mut self, defer: Deferral) -> Elector {
        self.defer = Some(defer);
        self
    }

    fn annotate_lease(&self, lease: &mut Lease) {
        if !self.annotations.is_empty() {
            lease
                .metadata
                .annotations
                .get_or_insert_default()
                .extend(self.annotations.clone());
        }
    }

    fn spec(&self, now: Timestamp, acquired: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.lease_duration.as_secs() as i32),
            acquire_time: Some(micro(acquired)),
            renew_time: Some(micro(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Tries once to acquire or renew the Lease (and keeps its annotations).
    pub async fn try_acquire(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            self.annotate_lease(&mut lease);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    Ok(Attempt::Following("another replica".to_string()))
                }
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        let (acquired, transitions) = if holder == self.identity {
            (spec.acquire_time.map(|t| t.0).unwrap_or(now), transitions)
        } else {
            if !expired(&lease, self.timing.lease_duration, now) {
                return Ok(Attempt::Following(holder));
            }
            (now, transitions + 1)
        };
        lease.spec = Some(self.spec(now, acquired, transitions));
        self.annotate_lease(&mut lease);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Leading),
            // Someone else wrote first: they win this time.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Following(holder)),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if this replica holds it (on a graceful stop), so a follower takes
    /// over at once instead of after the Lease expires.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Campaigns until this replica leads, then keeps the Lease. `leading` says whether this
    /// replica leads; returns when leadership is lost (the Lease could not be renewed within its
    /// duration), after which the process should stop acting as leader.
    pub async fn run(&self, leading: watch::Sender<bool>) {
        let mut last_renewal: Option<tokio::time::Instant> = None;
        let mut deferred = 0;
        loop {
            if let Some(defer) = &self.defer
                && !*leading.borrow()
                && deferred < DEFERRALS
                && let Ok(Some(lease)) = self.api.get_opt(&self.name).await
                && defer(&lease)
            {
                deferred += 1;
                tracing::info!(lease = %self.name, "this replica's copy of the store is not the newest: leaving the Lease to a current replica for now");
                tokio::time::sleep(self.timing.renew).await;
                continue;
            }
            match self.try_acquire().await {
                Ok(Attempt::Leading) => {
                    if !*leading.borrow() {
                        tracing::info!(lease = %self.name, identity = %self.identity, "leading");
                    }
                    last_renewal = Some(tokio::time::Instant::now());
                    let _ = leading.send(true);
                }
                Ok(Attempt::Following(holder)) => {
                    if *leading.borrow() {
                        tracing::warn!(lease = %self.name, %holder, "lost the leader Lease");
                        let _ = leading.send(false);
                        return;
                    }
                    tracing::debug!(lease = %self.name, %holder, "following");
                }
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "leader election");
                    if let Some(at) = last_renewal
                        && at.elapsed() >= self.timing.lease_duration
                    {
                        tracing::warn!(lease = %self.name, "could not renew the leader Lease in time");
                        let _ = leading.send(false);
                        return;
                    }
                }
            }
            tokio::time::sleep(self.timing.renew).await;
        }
    }
}

/// Whether nobody holds `lease` any more (released, or not renewed within its duration).
pub fn expired(lease: &Lease, default_duration: Duration, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return true;
    };
    if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
        return true;
    }
    let duration = spec
        .lease_duration_seconds
        .map(|s| Duration::from_secs(s.max(0) as u64))
        .unwrap_or(default_duration);
    spec.renew_time
        .as_ref()
        .and_then(|t| t.0.checked_add(duration).ok())
        .is_none_or(|e| e <= now)
}
