//! Starting the agent's servers: echo targets (HTTP, HTTPS), health and metrics.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use kdoctor_transport::limits::ServeLimits;
use kdoctor_transport::tls::{Identity, TlsError, read_roots, server_config};
use tokio::task::JoinHandle;

use crate::config::{AgentArgs, host_name};
use crate::dns_server::{Counters, serve_tcp, serve_udp};
use crate::echo::Echo;
use crate::metrics::Metrics;
use crate::server::health::{Health, health_router, metrics_router};
use crate::server::{ListenError, serve};
use crate::spool::{Spool, SpoolError};

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A port could not be opened.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The HTTPS target's certificate is unusable.
    #[error("HTTPS target certificate: {0}")]
    Tls(#[from] TlsError),
    /// The report API's CA certificate is unusable.
    #[error("report API client CA (--tls-ca-cert): {0}")]
    ClientCa(TlsError),
    /// The spool directory cannot be used.
    #[error("report spool (--report-dir): {0}")]
    Spool(#[from] SpoolError),
}

/// The running servers and where they listen.
pub struct RunningAgent {
    /// HTTP echo target addresses.
    pub http: Vec<SocketAddr>,
    /// HTTPS echo target addresses.
    pub https: Vec<SocketAddr>,
    /// UDP echo target addresses.
    pub udp_echo: Vec<SocketAddr>,
    /// Health endpoint addresses.
    pub health: Vec<SocketAddr>,
    /// `/metrics` addresses.
    pub metrics: Vec<SocketAddr>,
    /// Report API addresses (empty without a spool).
    pub reports: Vec<SocketAddr>,
    /// The report spool, when configured.
    pub spool: Option<Arc<Spool>>,
    /// DNS test server addresses: UDP, TCP, DoT (empty unless `--dns-server`).
    pub dns: [Vec<SocketAddr>; 3],
    /// Query counters of the DNS test server.
    pub dns_counters: Counters,
    /// The echo API's state (counters).
    pub echo: Echo,
    /// Metrics registry.
    pub registry: Metrics,
    /// Readiness.
    pub health_state: Health,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningAgent {
    /// Waits until a server task ends (they only end by panicking or being aborted).
    pub async fn wait(mut self) {
        if let Some(first) = self.tasks.pop() {
            let _ = first.await;
        }
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Binds every port on every address of `args.bind`. An IPv6 wildcard that the host cannot
/// open is replaced by the IPv4 wildcard.
fn bind_all(
    what: &'static str,
    addrs: &[IpAddr],
    port: u16,
) -> Result<Vec<tokio::net::TcpListener>, ListenError> {
    bind_each(what, addrs, port, crate::server::socket::tcp)
}

/// Opens a socket with `open` on each address at `port`; the default `::` alone falls back to
/// IPv4 where IPv6 is disabled.
fn bind_each<T>(
    what: &'static str,
    addrs: &[IpAddr],
    port: u16,
    open: impl Fn(SocketAddr) -> std::io::Result<T>,
) -> Result<Vec<T>, ListenError> {
    let mut sockets = Vec::new();
    let failed = |addr, source| ListenError { what, addr, source };
    for ip in addrs {
        let addr = SocketAddr::new(*ip, port);
        match open(addr) {
            Ok(socket) => sockets.push(socket),
            Err(e) if ip.is_ipv6() && ip.is_unspecified() && addrs.len() == 1 => {
                tracing::warn!(error = %e, what, "IPv6 unavailable, listening on IPv4 only");
                let v4 = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port);
                sockets.push(open(v4).map_err(|e| failed(v4, e))?);
            }
            Err(e) => return Err(failed(addr, e)),
        }
    }
    Ok(sockets)
}

/// Starts the echo targets, health and metrics servers.
pub async fn start(args: &AgentArgs) -> Result<RunningAgent, StartError> {
    let metrics = Metrics::with_max_series(args.metrics_max_series);
    let health = Health::default();
    let name = args.pod_name.clone().unwrap_or_else(host_name);
    let echo = Echo::new(&name, metrics.clone());
    let identity = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Identity::from_files(cert, key)?,
        _ => {
            let mut names = vec![name.clone(), "localhost".to_string()];
            names.extend(
                args.bind
                    .iter()
                    .filter(|ip| !ip.is_unspecified())
                    .map(|ip| ip.to_string()),
            );
            names.extend(["127.0.0.1".to_string(), "::1".to_string()]);
            names.dedup();
            Identity::self_signed(&names)?
        }
    };
    let report_tls = match &args.report_dir {
        Some(_) => {
            let roots = read_roots(&args.tls_ca_cert).map_err(StartError::ClientCa)?;
            Some(Arc::new(server_config(identity.clone(), Some(roots))?))
        }
        None => None,
    };
    let dot_tls = if args.dns_server {
        let mut config = server_config(identity.clone(), None)?;
        // DNS over TLS has no HTTP: offer `dot` (RFC 7858's ALPN id) and nothing else.
        config.alpn_protocols = vec![b"dot".to_vec()];
        Some(Arc::new(config))
    } else {
        None
    };
    let tls = Arc::new(server_config(identity, None)?);
    let mut running = RunningAgent {
        http: Vec::new(),
        https: Vec::new(),
        udp_echo: Vec::new(),
        health: Vec::new(),
        metrics: Vec::new(),
        reports: Vec::new(),
        spool: None,
        dns: Default::default(),
        dns_counters: Counters::default(),
        echo: echo.clone(),
        registry: metrics.clone(),
        health_state: health.clone(),
        tasks: Vec::new(),
    };
    let local = |l: &tokio::net::TcpListener| l.local_addr().ok();
    // Each listener has its own connection cap: clients holding every slot of an echo target
    // leave the health and report listeners theirs.
    let limits = ServeLimits::default();
    for listener in bind_all("HTTP echo target", &args.bind, args.app_http_port)? {
        running.http.extend(local(&listener));
        running.tasks.push(serve(
            listener,
            echo.clone().router(),
            None,
            metrics.clone(),
            limits,
        ));
    }
    for listener in bind_all("HTTPS echo target", &args.bind, args.app_https_port)? {
        running.https.extend(local(&listener));
        running.tasks.push(serve(
            listener,
            echo.clone().router(),
            Some(tls.clone()),
            metrics.clone(),
            limits,
        ));
    }
    let udp_echo = bind_each(
        "UDP echo target",
        &args.bind,
        args.udp_echo_port,
        crate::udp_echo::bind,
    )?;
    for socket in udp_echo {
        running.udp_echo.extend(socket.local_addr().ok());
        running
            .tasks
            .push(crate::udp_echo::serve(socket, metrics.clone()));
    }
    let health_routes = health_router(health.clone()).merge(metrics_router(metrics.clone()));
    for listener in bind_all("health", &args.bind, args.health_port)? {
        running.health.extend(local(&listener));
        running.tasks.push(serve(
            listener,
            health_routes.clone(),
            None,
            metrics.clone(),
            limits,
        ));
    }
    for listener in bind_all("metrics", &args.bind, args.metrics_port)? {
        running.metrics.extend(local(&listener));
        running.tasks.push(serve(
            listener,
            metrics_router(metrics.clone()),
            None,
            metrics.clone(),
            limits,
        ));
    }
    if let (Some(dir), Some(report_tls)) = (&args.report_dir, report_tls) {
        let spool = Arc::new(Spool::open(dir)?);
        for listener in bind_all("report API", &args.bind, args.report_port)? {
            running.reports.extend(local(&listener));
            running.tasks.push(serve(
                listener,
                crate::report_api::router(spool.clone(), &args.report_token),
                Some(report_tls.clone()),
                // Harvests are not probe traffic: keep them out of the target counters.
                Metrics::new(),
                limits,
            ));
        }
        running
            .tasks
            .push(crate::report_api::sweeper(spool.clone()));
        running.spool = Some(spool);
    }
    if let Some(dot_tls) = dot_tls {
        let counters = running.dns_counters.clone();
        let udp = bind_each(
            "DNS test server (UDP)",
            &args.bind,
            args.dns_udp_port,
            crate::server::socket::udp,
        )?;
        for socket in udp {
            running.dns[0].extend(socket.local_addr().ok());
            running
                .tasks
                .push(serve_udp(socket, counters.clone(), args.dns_upstream));
        }
        for listener in bind_all("DNS test server (TCP)", &args.bind, args.dns_tcp_port)? {
            running.dns[1].extend(local(&listener));
            running.tasks.push(serve_tcp(
                listener,
                None,
                counters.clone(),
                args.dns_upstream,
                limits,
            ));
        }
        for listener in bind_all("DNS test server (TLS)", &args.bind, args.dns_tls_port)? {
            running.dns[2].extend(local(&listener));
            running.tasks.push(serve_tcp(
                listener,
                Some(dot_tls.clone()),
                counters.clone(),
                args.dns_upstream,
                limits,
            ));
        }
    }
    health.set_ready(true);
    tracing::info!(
        http = ?running.http, https = ?running.https, udp_echo = ?running.udp_echo, health = ?running.health,
        metrics = ?running.metrics, reports = ?running.reports, dns = ?running.dns, server_name = %name, "agent servers listening"
    );
    Ok(running)
}
