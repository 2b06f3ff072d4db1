//! The managed certificates over a controller's life: issued at start (retried while the API
//! server is unreachable, so a controller starting during a kube-apiserver restart waits instead
//! of crash-looping), the serving certificate written where the server reloads it from, and the
//! whole set checked again every hour.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kdoctor_transport::pki::{Pem, PkiError};
use kube::Client;

use super::bootstrap::{CertError, CertSettings, Issued, ensure};

/// How long the first issue is retried.
const PATIENCE: Duration = Duration::from_secs(60);

/// How often the certificates are checked again.
const CHECK_EVERY: Duration = Duration::from_secs(3600);

/// The install's certificates, retried for [`PATIENCE`].
pub async fn ensure_patiently(
    client: &Client,
    settings: &CertSettings,
) -> Result<Issued, CertError> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match ensure(client, settings).await {
            Ok(issued) => return Ok(issued),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "managing the install's certificates failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes the serving certificate to `<data>/pki/serving.{crt,key}` (the key readable by its
/// owner only) and returns the two paths.
pub fn write_serving(data: &Path, serving: &Pem) -> Result<(PathBuf, PathBuf), PkiError> {
    let dir = data.join("pki");
    let (cert, key) = (dir.join("serving.crt"), dir.join("serving.key"));
    serving.write(&cert, &key)?;
    Ok((cert, key))
}

/// Checks the certificates every [`CHECK_EVERY`]; a renewed serving certificate is written
/// where the server reloads it from (see [`write_serving`]).
pub async fn keep_certificates(client: Client, settings: CertSettings, data: PathBuf) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        match ensure(&client, &settings).await {
            Ok(issued) if issued.renewed.is_some() => {
                if let Err(error) = write_serving(&data, &issued.serving) {
                    tracing::error!(%error, "cannot write the renewed serving certificate");
                }
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "checking the install's certificates failed"),
        }
    }
}
