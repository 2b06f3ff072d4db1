//! The peer of a read through the aggregation layer: nginx serving the same bytes from disk —
//! the plain JSON the API server answers and the API server's own gzip encoding of it
//! (`gzip_static`), over TLS and HTTP/2, on the cluster's loopback — read by the same kubectl
//! the same way (`get --raw`, which asks for gzip as kubectl always does). One nginx process
//! (`master_process off`), as one replica answers a read.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use kdoctor_transport::pki::Ca;

/// A running nginx and the kubeconfig that reaches it (stopped when dropped).
pub struct Nginx {
    child: Child,
    pub kubeconfig: PathBuf,
    /// The plain bytes it serves.
    pub plain_bytes: u64,
}

impl Nginx {
    /// Serves at `path` the bytes `admin` is answered there, plain and gzip-encoded. Call it on
    /// a thread inside the cluster's network namespace: nginx listens on its loopback.
    pub async fn serving(dir: &Path, admin: &kube::Client, path: &str) -> Nginx {
        let root = dir.join("nginx");
        let file = root.join("www").join(path.trim_start_matches('/'));
        std::fs::create_dir_all(file.parent().expect("a file in a folder")).expect("www folder");
        let plain = get(admin, path, None).await;
        let gzipped = get(admin, path, Some("gzip")).await;
        assert_eq!(
            gzipped.get(..2),
            Some(&[0x1f, 0x8b][..]),
            "the API server's gzip answer to {path} is not gzip"
        );
        std::fs::write(&file, &plain).expect("the plain copy");
        std::fs::write(format!("{}.gz", file.display()), &gzipped).expect("the gzip copy");

        let ca = Ca::generate("kdoctor-bench-nginx").expect("a CA");
        let serving = ca
            .serving(&["127.0.0.1".to_string()])
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
        // kube-proxy sends those on the loopback to a Service, not to nginx.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let conf = root.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "master_process off;\nworker_processes 1;\nerror_log {root}/error.log warn;\n\
                 pid {root}/nginx.pid;\ndaemon off;\nevents {{ worker_connections 1024; }}\n\
                 http {{\n  access_log off;\n  client_body_temp_path {root};\n  \
                 proxy_temp_path {root};\n  fastcgi_temp_path {root};\n  uwsgi_temp_path {root};\n  \
                 scgi_temp_path {root};\n  server {{\n    listen 127.0.0.1:{port} ssl http2;\n    \
                 ssl_certificate {cert};\n    ssl_certificate_key {key};\n    \
                 root {root}/www;\n    default_type application/json;\n    gzip_static on;\n  }}\n}}\n",
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
                 server: https://127.0.0.1:{port}\n    certificate-authority: {ca}\n\
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
            plain_bytes: plain.len() as u64,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline && matches!(nginx.child.try_wait(), Ok(None)),
                "nginx did not come up: {}",
                std::fs::read_to_string(root.join("error.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body `client` is answered at `path`, as sent (a client without decompression: the
/// encoding asked for stays on the bytes).
async fn get(client: &kube::Client, path: &str, encoding: Option<&str>) -> Vec<u8> {
    let mut request = http::Request::get(path);
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
