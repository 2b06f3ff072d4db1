//! Starting a whole server: certificates, authentication mode, the store, the accept loop.
//! `kdoctor apiserver` and the tests use this one path.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kdoctor_store::{Store, StoreConfig, Writes};
use tokio::sync::watch;

use crate::auth::Auth;
use crate::auth::config::AuthnConfig;
use crate::auth::kube_reviews::{KubeReviews, watch_configmap};
use crate::auth::x509::CaPool;
use crate::metrics::ApiMetrics;
use crate::{AppState, router, serve};
use kdoctor_transport::pki::{Ca, Pem, kubeconfig};
use kdoctor_transport::tls::{ClientAuth, Identity, ServingCert, serving_config};

/// How clients are authenticated and authorized.
pub enum AuthMode {
    /// Client certificates of the server's CA (and `extra_client_ca`); every such user may do
    /// everything.
    Standalone,
    /// As an aggregated API server, through this cluster client.
    Delegated(kube::Client),
    /// Given by the embedding program (e.g. reviews answered by a test double).
    Custom(Arc<Auth>),
}

/// Connection threads at most (one per core up to this): the API server shares its machine
/// with the controller's reconcilers, the store's writers and the harvester.
pub const CONNECTION_THREADS_CAP: usize = 4;

/// What to start.
pub struct ServerOptions {
    /// Store directory (also holds `pki/` with the server's CA).
    pub data: PathBuf,
    /// Address to listen on (port 0: any).
    pub listen: SocketAddr,
    /// Serving certificate and key files, reloaded when they change; `None`: issued by the CA.
    pub tls_files: Option<(PathBuf, PathBuf)>,
    /// Extra names for an issued serving certificate.
    pub tls_sans: Vec<String>,
    /// More CAs accepted for client certificates in standalone mode (PEM).
    pub extra_client_ca: Option<String>,
    /// Authentication mode.
    pub auth: AuthMode,
    /// An already open store to serve (tests); `None`: open `data` in the background.
    pub store: Option<Arc<Store>>,
    /// How often retention runs.
    pub retention_every: Duration,
    /// What retention removes.
    pub retention: kdoctor_store::Retention,
    /// How often the serving certificate files are checked for changes.
    pub tls_reload_every: Duration,
    /// Task objects to serve read-only under `kdoctor.io` (a server with no cluster behind it).
    pub tasks: Option<crate::tasks::TaskObjects>,
    /// Deadlines and the connection cap.
    pub limits: crate::serve::ServeLimits,
    /// Threads of their own that connections run on (0: the caller's runtime); default one per
    /// core, at most [`CONNECTION_THREADS_CAP`].
    pub connection_threads: usize,
}

impl ServerOptions {
    /// Standalone defaults for a store directory.
    pub fn standalone(data: impl Into<PathBuf>, listen: SocketAddr) -> ServerOptions {
        ServerOptions {
            data: data.into(),
            listen,
            tls_files: None,
            tls_sans: vec![],
            extra_client_ca: None,
            auth: AuthMode::Standalone,
            store: None,
            retention_every: Duration::from_secs(600),
            retention: kdoctor_store::Retention::default(),
            tls_reload_every: Duration::from_secs(10),
            tasks: None,
            limits: crate::serve::ServeLimits::default(),
            connection_threads: kdoctor_transport::runtime_threads::per_core(
                CONNECTION_THREADS_CAP,
            ),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address cannot be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The threads connections run on cannot be started.
    #[error("cannot start the connection threads: {0}")]
    Threads(std::io::Error),
    /// Certificates cannot be made or read.
    #[error(transparent)]
    Pki(#[from] kdoctor_transport::pki::PkiError),
    /// TLS settings are unusable.
    #[error(transparent)]
    Tls(#[from] kdoctor_transport::tls::TlsError),
    /// A CA bundle is unusable.
    #[error("client CA: {0}")]
    ClientCa(kdoctor_transport::tls::TlsError),
}

/// A running server.
pub struct RunningServer {
    /// Where it listens.
    pub address: SocketAddr,
    /// Its state (store, health, metrics).
    pub state: AppState,
    /// The server's CA.
    pub ca: Ca,
    /// The threads its connections run on.
    pub threads: kdoctor_transport::runtime_threads::RuntimeThreads,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// `https://<address>`.
    pub fn url(&self) -> String {
        match self.address {
            SocketAddr::V6(a) => format!("https://[{}]:{}", a.ip(), a.port()),
            SocketAddr::V4(a) => format!("https://{a}"),
        }
    }

    /// A client certificate of the server's CA.
    pub fn client_cert(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<Pem, kdoctor_transport::pki::PkiError> {
        self.ca.client(user, groups)
    }

    /// A kubeconfig with a `system:masters` client certificate of the server's CA.
    pub fn kubeconfig(&self) -> Result<String, kdoctor_transport::pki::PkiError> {
        let client = self.ca.client("kdoctor-admin", &["system:masters"])?;
        Ok(kubeconfig(
            &self.url(),
            &self.ca.pem.cert,
            &client,
            "kdoctor",
        ))
    }

    /// Stops accepting, ends watches, and waits (up to 5 s) for the accept loop.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// Starts serving.
pub async fn start(options: ServerOptions) -> Result<RunningServer, ServerError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServerError::Listen {
            address: options.listen,
            source,
        })?;
    let address = listener
        .local_addr()
        .map_err(|source| ServerError::Listen {
            address: options.listen,
            source,
        })?;
    let ca = Ca::load_or_create(&options.data.join("pki"), "kdoctor-apiserver-ca")?;
    let serving = match &options.tls_files {
        Some((cert, key)) => {
            let serving = ServingCert::new(Identity::from_files(cert, key)?.certified_key()?);
            tokio::spawn(serving.clone().watch_files(
                cert.clone(),
                key.clone(),
                options.tls_reload_every,
            ));
            serving
        }
        None => {
            let mut names = vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
                "::1".to_string(),
            ];
            names.push(address.ip().to_string());
            names.extend(options.tls_sans.iter().cloned());
            names.sort();
            names.dedup();
            let pem = ca.serving(&names)?;
            ServingCert::new(pem.identity()?.certified_key()?)
        }
    };
    let metrics = Arc::new(ApiMetrics::new());
    let (stop, shutdown) = watch::channel(false);
    let state = match options.auth {
        AuthMode::Standalone => {
            let mut bundle = ca.pem.cert.clone();
            if let Some(extra) = &options.extra_client_ca {
                bundle.push_str(extra);
            }
            let pool = CaPool::from_pem(bundle.as_bytes()).map_err(ServerError::ClientCa)?;
            let auth = Arc::new(Auth::standalone(AuthnConfig {
                client_ca: Some(pool),
                requestheader: None,
            }));
            AppState::new(auth, metrics, shutdown.clone())
        }
        AuthMode::Delegated(client) => {
            let auth = Arc::new(Auth::delegated(
                AuthnConfig::default(),
                Arc::new(KubeReviews::new(client.clone())),
            ));
            let state = AppState::new(auth.clone(), metrics, shutdown.clone());
            state.health.set_authentication_loaded(false);
            let health = state.health.clone();
            tokio::spawn(watch_configmap(client, auth, move || {
                health.set_authentication_loaded(true)
            }));
            state
        }
        AuthMode::Custom(auth) => AppState::new(auth, metrics, shutdown.clone()),
    };
    let state = state.with_tasks(options.tasks);
    match options.store {
        Some(store) => {
            let _ = store.metrics().register(&state.metrics.registry);
            state.set_store(store);
        }
        None => open_store(
            state.clone(),
            options.data.clone(),
            options.retention.clone(),
            options.retention_every,
        ),
    }
    let threads = crate::conn_threads::start(options.connection_threads, shutdown.clone())
        .map_err(ServerError::Threads)?;
    let task = tokio::spawn(serve::serve_tls(
        listener,
        serving_config(serving, ClientAuth::Requested)?,
        router(state.clone()),
        shutdown,
        options.limits,
        threads.clone(),
    ));
    Ok(RunningServer {
        address,
        state,
        ca,
        threads,
        stop,
        task,
    })
}

/// Opens the store in the background, retrying while another process holds it; the API answers
/// 503 and readyz fails until then.
fn open_store(
    state: AppState,
    data: PathBuf,
    retention: kdoctor_store::Retention,
    retention_every: Duration,
) {
    tokio::spawn(async move {
        loop {
            let config = StoreConfig {
                retention: retention.clone(),
                ..StoreConfig::new(&data)
            };
            match tokio::task::spawn_blocking(move || Store::open(config)).await {
                Ok(Ok(store)) => {
                    let store = Arc::new(store);
                    let _ = store.metrics().register(&state.metrics.registry);
                    state.set_store(store.clone());
                    let writes = state.clone();
                    tokio::spawn(kdoctor_store::run_retention(
                        move || {
                            writes
                                .writes()
                                .unwrap_or_else(|_| Writes::Local(store.clone()))
                        },
                        retention_every,
                    ));
                    return;
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "the report store is not open; retrying in 5 s")
                }
                Err(e) => tracing::error!(error = %e, "opening the store panicked"),
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
}
