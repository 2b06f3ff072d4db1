//! `kube-sim forward`: a TCP port on the host's loopback whose connections are made from inside
//! a network namespace, as `kubectl port-forward` gives a laptop a port of a cluster. The test
//! cluster's API server is reached this way (hack/cluster.sh), so its address stays in the
//! namespace.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// How long a connection inside the namespace may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more wait for a slot.
const MAX_CONNECTIONS: usize = 1024;

type Reply = oneshot::Sender<std::io::Result<std::net::TcpStream>>;

/// A thread that lives in the namespace and opens connections there on request.
#[derive(Clone)]
pub struct Connector {
    requests: mpsc::Sender<(SocketAddr, Reply)>,
}

impl Connector {
    /// Starts the thread; fails when the namespace cannot be entered.
    pub fn start(netns: &Path) -> std::io::Result<Self> {
        let (requests, incoming) = mpsc::channel::<(SocketAddr, Reply)>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let path: PathBuf = netns.to_path_buf();
        std::thread::Builder::new()
            .name("netns-connector".into())
            .spawn(move || {
                if let Err(e) = super::enter(&path) {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
                let _ = ready_tx.send(Ok(()));
                for (to, reply) in incoming {
                    let _ = reply.send(std::net::TcpStream::connect_timeout(&to, CONNECT_TIMEOUT));
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the connector thread ended"))??;
        Ok(Connector { requests })
    }

    /// A connection to `to`, opened inside the namespace.
    pub async fn connect(&self, to: SocketAddr) -> std::io::Result<TcpStream> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send((to, reply))
            .map_err(|_| std::io::Error::other("the connector thread ended"))?;
        let stream = answer
            .await
            .map_err(|_| std::io::Error::other("the connector thread ended"))??;
        stream.set_nonblocking(true)?;
        TcpStream::from_std(stream)
    }
}

/// Serves `listen` until the process stops, forwarding each connection to `to` in the
/// namespace; writes the bound port to `port_file` once listening (port 0 picks one).
pub async fn serve(
    netns: &Path,
    listen: SocketAddr,
    to: SocketAddr,
    port_file: Option<&Path>,
) -> std::io::Result<()> {
    let connector = Connector::start(netns)?;
    let listener = TcpListener::bind(listen).await?;
    let local = listener.local_addr()?;
    if let Some(file) = port_file {
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, local.port().to_string())?;
        std::fs::rename(&tmp, file)?;
    }
    tracing::info!(%local, %to, netns = %netns.display(), "forwarding");
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (mut client, peer) = listener.accept().await?;
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return Ok(());
        };
        let connector = connector.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match connector.connect(to).await {
                Ok(mut upstream) => {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
                Err(e) => {
                    tracing::warn!(%peer, %to, error = %e, "cannot connect inside the namespace")
                }
            }
        });
    }
}
