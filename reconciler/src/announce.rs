//! The Lease `kdoctor-controller-lease` names the replica that leads, for people and scripts
//! (`kubectl -n kdoctor get lease` shows it, as upstream's did). It decides nothing: the
//! replicas elect their leader by Raft. The leader renews it while it leads, through the fenced
//! client, so a deposed leader stops renewing it as it stops every other write.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

/// Name of the Lease (upstream's).
pub const LEASE_NAME: &str = "kdoctor-controller-lease";

/// How often the leader renews the Lease.
const RENEW: Duration = Duration::from_secs(5);

/// The Lease's spec when `identity` leads since `acquired`.
fn spec(identity: &str, now: Timestamp, acquired: Timestamp, transitions: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some((RENEW * 3).as_secs() as i32),
        acquire_time: Some(MicroTime(acquired)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    }
}

/// Writes the Lease once: this replica holds it from now on. `last` is the Lease as this
/// replica last wrote it: a renewal replaces it by that resourceVersion, one request; only
/// when it is gone or someone else wrote it since (a conflict) is it read again.
async fn renew(
    api: &Api<Lease>,
    identity: &str,
    last: &mut Option<Lease>,
) -> Result<(), kube::Error> {
    let now = Timestamp::now();
    if let Some(mut lease) = last.take() {
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(MicroTime(now));
        }
        match api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                *last = Some(written);
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let written = match api.get_opt(LEASE_NAME).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.to_string()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(identity, now, now, 0)),
            };
            api.create(&PostParams::default(), &lease).await?
        }
        Some(mut lease) => {
            let old = lease.spec.clone().unwrap_or_default();
            let (acquired, transitions) = if old.holder_identity.as_deref() == Some(identity) {
                (
                    old.acquire_time.map_or(now, |t| t.0),
                    old.lease_transitions.unwrap_or(0),
                )
            } else {
                (now, old.lease_transitions.unwrap_or(0) + 1)
            };
            lease.spec = Some(spec(identity, now, acquired, transitions));
            api.replace(LEASE_NAME, &PostParams::default(), &lease)
                .await?
        }
    };
    *last = Some(written);
    Ok(())
}

/// Keeps the Lease naming `identity` until dropped (run it while this replica leads).
pub async fn run(client: Client, namespace: String, identity: String) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let mut last: Option<Lease> = None;
    loop {
        if let Err(e) = renew(&api, &identity, &mut last).await {
            tracing::debug!(lease = LEASE_NAME, error = %e, "announcing the leader (retrying)");
        }
        tokio::time::sleep(RENEW).await;
    }
}
