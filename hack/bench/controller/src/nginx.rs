//! The peer of a read through the aggregation layer: nginx serving the same bytes from disk —
//! the plain JSON the API server answers and the API server's own gzip encoding of it
//! (`gzip_static`), over TLS and HTTP/2 — read by the same kubectl the same way (`get --raw`,
//! which asks for gzip as kubectl always does). Two ways: through kube-apiserver's aggregation
//! layer, as an APIService of a group of its own (like for like: the same client, the same
//! hop, the same front-proxy request), and directly (what the hop itself costs). One nginx
//! process (`master_process off`), as one replica answers a read.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use kdoctor_transport::pki::Ca;
use kube_sim::testcluster::TestCluster;

/// The group nginx serves behind the aggregation layer, beside system.kdoctor.io.
const GROUP: &str = "nginx.bench.kdoctor.io";
/// Its Service (no selector: its EndpointSlice names nginx's address).
const SERVICE: &str = "kdoctor-bench-nginx";

/// A running nginx and the kubeconfig that reaches it (stopped when dropped).
pub struct Nginx {
    child: Child,
    /// A kubeconfig whose server is nginx itself.
    pub kubeconfig: PathBuf,
    /// The report's path on nginx: the same through kube-apiserver and directly.
    pub path: String,
    /// The plain bytes it serves.
    pub plain_bytes: u64,
    /// The gzip-encoded bytes it serves.
    pub gzip_bytes: u64,
}

impl Nginx {
    /// Serves the bytes `admin` is answered at `report` (plain and gzip-encoded) under
    /// [`GROUP`], on an address of the cluster's node network, and registers that group's
    /// APIService with kube-apiserver; returns once the APIService is Available. Call it on a
    /// thread inside the cluster's network namespace.
    pub async fn serving(
        dir: &Path,
        kube: &TestCluster,
        admin: &kube::Client,
        report: &str,
    ) -> Nginx {
        let root = dir.join("nginx");
        let name = report.rsplit('/').next().expect("a report's name");
        let path = format!("/apis/{GROUP}/v1/kdoctorreports/{name}");
        let file = root.join("www").join(path.trim_start_matches('/'));
        std::fs::create_dir_all(file.parent().expect("a file in a folder")).expect("www folder");
        let plain = get(admin, report, None).await;
        let gzipped = get(admin, report, Some("gzip")).await;
        assert_eq!(
            gzipped.get(..2),
            Some(&[0x1f, 0x8b][..]),
            "the API server's gzip answer to {report} is not gzip"
        );
        std::fs::write(&file, &plain).expect("the plain copy");
        std::fs::write(format!("{}.gz", file.display()), &gzipped).expect("the gzip copy");

        // kube-apiserver's own address: nginx must be on the node network for an EndpointSlice
        // to name it (a loopback address is refused there).
        let address = apiserver_address(kube);
        let ca = Ca::generate("kdoctor-bench-nginx").expect("a CA");
        let serving = ca
            .serving(&[address.to_string(), format!("{SERVICE}.default.svc")])
            .expect("nginx's certificate");
        let (ca_path, cert, key) = (
            root.join("ca.crt"),
            root.join("tls.crt"),
            root.join("tls.key"),
        );
        std::fs::write(&ca_path, &ca.pem.cert).expect("CA file");
        std::fs::write(&cert, &serving.cert).expect("certificate file");
        std::fs::write(&key, &serving.key).expect("key file");
        // A port the kernel picks is in the ephemeral range, outside NodePorts' (30000–32767):
        // kube-proxy sends those to a Service, not to nginx.
        let port = std::net::TcpListener::bind((address, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // The group version's discovery document: the APIService is Available once it answers.
        let discovery = format!(
            "{{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"{GROUP}/v1\",\"resources\":[]}}"
        );
        let conf = root.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "master_process off;\nworker_processes 1;\nerror_log {root}/error.log warn;\n\
                 pid {root}/nginx.pid;\ndaemon off;\nevents {{ worker_connections 1024; }}\n\
                 http {{\n  access_log off;\n  client_body_temp_path {root};\n  \
                 proxy_temp_path {root};\n  fastcgi_temp_path {root};\n  uwsgi_temp_path {root};\n  \
                 scgi_temp_path {root};\n  server {{\n    listen {address}:{port} ssl http2;\n    \
                 ssl_certificate {cert};\n    ssl_certificate_key {key};\n    \
                 root {root}/www;\n    default_type application/json;\n    gzip_static on;\n    \
                 location = /apis/{GROUP}/v1 {{ return 200 '{discovery}'; }}\n  }}\n}}\n",
                root = root.display(),
                cert = cert.display(),
                key = key.display(),
            ),
        )
        .expect("nginx.conf");
        // A user with a token nginx ignores: one without credentials makes kubectl ask for a
        // password on its input.
        let kubeconfig = root.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: nginx\n  cluster:\n    \
                 server: https://{address}:{port}\n    certificate-authority: {ca}\n\
                 users:\n- name: anyone\n  user: {{token: unused}}\ncontexts:\n- name: nginx\n  \
                 context:\n    cluster: nginx\n    user: anyone\ncurrent-context: nginx\n",
                ca = ca_path.display()
            ),
        )
        .expect("nginx's kubeconfig");
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&root)
            .spawn()
            .expect("nginx (apt-get install -y nginx)");
        let mut nginx = Nginx {
            child,
            kubeconfig,
            path,
            plain_bytes: plain.len() as u64,
            gzip_bytes: gzipped.len() as u64,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect((address, port)).is_err() {
            assert!(
                Instant::now() < deadline && matches!(nginx.child.try_wait(), Ok(None)),
                "nginx did not come up: {}",
                std::fs::read_to_string(root.join("error.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        register(kube, address, port, &ca.pem.cert);
        nginx
    }
}

/// The address in kube-apiserver's URL (the admin kubeconfig's server).
fn apiserver_address(kube: &TestCluster) -> IpAddr {
    let config = kube::config::Kubeconfig::read_from(kube.inner_kubeconfig()).expect("kubeconfig");
    let server = config
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .expect("a server in the admin kubeconfig");
    let host = server
        .trim_start_matches("https://")
        .rsplit_once(':')
        .map_or(server.as_str(), |(host, _)| host)
        .trim_matches(['[', ']']);
    host.parse()
        .unwrap_or_else(|e| panic!("kube-apiserver's address {host}: {e}"))
}

/// nginx's Service, its EndpointSlice and [`GROUP`]'s APIService, applied; waits until the
/// APIService is Available.
fn register(kube: &TestCluster, address: IpAddr, port: u16, ca: &str) {
    let family = if address.is_ipv4() { "IPv4" } else { "IPv6" };
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    let manifest = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {SERVICE}, namespace: default}}\n\
         spec:\n  ports: [{{name: https, port: 443, targetPort: {port}}}]\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {SERVICE}\n  \
         namespace: default\n  labels: {{kubernetes.io/service-name: {SERVICE}}}\n\
         addressType: {family}\nports: [{{name: https, port: {port}, protocol: TCP}}]\n\
         endpoints: [{{addresses: [\"{address}\"], conditions: {{ready: true}}}}]\n---\n\
         apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1.{GROUP}}}\n\
         spec:\n  group: {GROUP}\n  version: v1\n  groupPriorityMinimum: 100\n  \
         versionPriority: 10\n  caBundle: {bundle}\n  \
         service: {{name: {SERVICE}, namespace: default, port: 443}}\n"
    );
    let mut apply = crate::kubectl(kube, &["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    apply
        .stdin
        .take()
        .expect("stdin")
        .write_all(manifest.as_bytes())
        .expect("the manifest to kubectl");
    let applied = apply.wait_with_output().expect("kubectl");
    assert!(
        applied.status.success(),
        "nginx's APIService: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    crate::await_available(kube, &format!("v1.{GROUP}"), Duration::from_secs(120));
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body `client` is answered at `path`, as sent (a client without decompression: the
/// encoding asked for stays on the bytes).
pub async fn get(client: &kube::Client, path: &str, encoding: Option<&str>) -> Vec<u8> {
    get_as(client, path, None, encoding).await
}

/// [`get`], asking for the representation `accept` (`None`: the server's default).
pub async fn get_as(
    client: &kube::Client,
    path: &str,
    accept: Option<&str>,
    encoding: Option<&str>,
) -> Vec<u8> {
    let mut request = http::Request::get(path);
    if let Some(accept) = accept {
        request = request.header(http::header::ACCEPT, accept);
    }
    if let Some(encoding) = encoding {
        request = request.header(http::header::ACCEPT_ENCODING, encoding);
    }
    let response = client
        .send(
            request
                .body(kube::client::Body::empty())
                .expect("a request"),
        )
        .await
        .expect("GET through kube-apiserver");
    assert!(
        response.status().is_success(),
        "GET {path}: {}",
        response.status()
    );
    response
        .into_body()
        .collect_bytes()
        .await
        .expect("the body")
        .to_vec()
}
