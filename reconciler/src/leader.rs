//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the holder renews
//! the Lease every `renew`; another replica takes it over only once it has not been renewed for
//! `lease_duration`. Writes are conditional on the resourceVersion, so two replicas never both
//! win. A leader that cannot renew in time gives up (the caller stops acting).

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
}

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

    /// Tries once to acquire or renew the Lease.
    pub async fn try_acquire(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
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
            let duration = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(self.timing.lease_duration);
            let expires = spec
                .renew_time
                .map(|t| t.0)
                .and_then(|t| t.checked_add(duration).ok());
            let expired = holder.is_empty() || expires.is_none_or(|e| e <= now);
            if !expired {
                return Ok(Attempt::Following(holder));
            }
            (now, transitions + 1)
        };
        lease.spec = Some(self.spec(now, acquired, transitions));
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
        loop {
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
