//! Real servers on loopback, each in its own temporary directory, killed on drop: nginx and
//! unbound. A missing binary fails the test loudly (hack/agent-test-peers.sh installs them).

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kdoctor_transport::tls::Identity;

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("kdoctor-agent-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn binary(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        let path = Path::new(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!(
        "{name} is not installed: these tests probe a real {name}; run hack/agent-test-peers.sh (as root) first"
    );
}

/// A free TCP port on 127.0.0.1 that is also free for UDP.
pub fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = tcp.local_addr().expect("addr").port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() && TcpListener::bind(("::1", port)).is_ok()
        {
            return port;
        }
    }
}

fn wait_for_tcp(addr: SocketAddr, child: &mut Child, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what} exited with {status} before listening on {addr}:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not listen on {addr} within 10 s");
}

/// Writes a self-signed certificate for 127.0.0.1, ::1 and localhost; returns (cert, key).
pub fn write_cert(dir: &Path) -> (PathBuf, PathBuf, Identity) {
    let certified = rcgen::generate_simple_self_signed(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])
    .expect("certificate");
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).expect("write cert");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key");
    let identity = Identity::from_files(&cert, &key).expect("identity");
    (cert, key, identity)
}

/// nginx serving HTTP on 127.0.0.1 and ::1, and HTTPS with HTTP/2.
pub struct Nginx {
    child: Child,
    pub http_port: u16,
    pub https_port: u16,
    /// The server certificate (PEM), to trust it as a CA.
    pub cert: PathBuf,
    _dir: TempDir,
}

impl Nginx {
    pub fn start() -> Nginx {
        let nginx = binary("nginx");
        let dir = TempDir::new("nginx");
        let (cert, key, _) = write_cert(&dir.0);
        let http_port = free_port();
        let https_port = free_port();
        let root = dir.0.join("www");
        std::fs::create_dir_all(&root).expect("www");
        std::fs::write(root.join("index.html"), "hello from nginx\n").expect("index");
        std::fs::write(root.join("big"), vec![b'x'; 100_000]).expect("big");
        let d = dir.0.display();
        let config = format!(
            r#"
daemon off;
# One process: killing it (on drop) ends nginx; a master's workers would outlive a SIGKILL.
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{http_port};
        listen [::1]:{http_port};
        listen 127.0.0.1:{https_port} ssl http2;
        listen [::1]:{https_port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {root};
        location = /status/503 {{ return 503 "unavailable\n"; }}
        location = /echo {{ return 200 "$request_method $http_x_probe\n"; }}
    }}
}}
"#,
            cert = cert.display(),
            key = key.display(),
            root = root.display(),
        );
        let conf = dir.0.join("nginx.conf");
        std::fs::write(&conf, config).expect("nginx.conf");
        let log = dir.0.join("error.log");
        let mut child = Command::new(nginx)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        wait_for_tcp(
            SocketAddr::from(([127, 0, 0, 1], http_port)),
            &mut child,
            "nginx",
            &log,
        );
        wait_for_tcp(
            SocketAddr::from(([127, 0, 0, 1], https_port)),
            &mut child,
            "nginx",
            &log,
        );
        Nginx {
            child,
            http_port,
            https_port,
            cert,
            _dir: dir,
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// unbound answering `probe.test` (A 127.0.0.1, AAAA ::1) authoritatively from local data over
/// UDP and TCP, and over TLS; every other name under `test.` is NXDOMAIN.
pub struct Unbound {
    child: Child,
    pub port: u16,
    pub tls_port: u16,
    pub cert: PathBuf,
    _dir: TempDir,
}

impl Unbound {
    pub fn start() -> Unbound {
        let unbound = binary("unbound");
        let dir = TempDir::new("unbound");
        let (cert, key, _) = write_cert(&dir.0);
        let port = free_port();
        let tls_port = free_port();
        let d = dir.0.display();
        let config = format!(
            r#"
server:
    verbosity: 1
    use-syslog: no
    logfile: "{d}/unbound.log"
    chroot: ""
    username: ""
    directory: "{d}"
    pidfile: "{d}/unbound.pid"
    interface: 127.0.0.1@{port}
    interface: ::1@{port}
    interface: 127.0.0.1@{tls_port}
    tls-port: {tls_port}
    tls-service-key: "{key}"
    tls-service-pem: "{cert}"
    do-ip6: yes
    do-udp: yes
    do-tcp: yes
    access-control: 127.0.0.0/8 allow
    access-control: ::1/128 allow
    module-config: "iterator"
    do-not-query-localhost: no
    num-threads: 1
    ratelimit: 0
    ip-ratelimit: 0
    local-zone: "test." static
    local-data: "probe.test. 3600 IN A 127.0.0.1"
    local-data: "probe.test. 3600 IN AAAA ::1"
remote-control:
    control-enable: no
"#,
            cert = cert.display(),
            key = key.display(),
        );
        let conf = dir.0.join("unbound.conf");
        std::fs::write(&conf, config).expect("unbound.conf");
        let log = dir.0.join("unbound.log");
        let mut child = Command::new(unbound)
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start unbound");
        wait_for_tcp(
            SocketAddr::from(([127, 0, 0, 1], port)),
            &mut child,
            "unbound",
            &log,
        );
        wait_for_tcp(
            SocketAddr::from(([127, 0, 0, 1], tls_port)),
            &mut child,
            "unbound",
            &log,
        );
        Unbound {
            child,
            port,
            tls_port,
            cert,
            _dir: dir,
        }
    }
}

impl Drop for Unbound {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
