//! The image: the Dockerfile and hack/image/build.sh describe one image, hack/image/kdoctor.json
//! (user, entrypoint, environment, exposed ports, files), and the image build.sh made holds
//! exactly that and runs with nothing else in its root filesystem.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

use sha2::Digest;

use crate::support::{repo, scratch};

/// hack/image/<image>.json.
fn description(image: &str) -> serde_json::Value {
    let path = repo().join(format!("hack/image/{image}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("description")).expect("JSON")
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

#[test]
fn the_dockerfile_describes_the_image_the_build_script_makes() {
    let spec = description("kdoctor");
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let last = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    let (build, runtime) = lines.split_at(last);
    // The builder runs the scripts hack/image/build.sh runs.
    assert!(
        build.contains(&r#"RUN hack/image/rootfs.sh "$(hack/image/binary.sh)" /rootfs"#),
        "{build:?}"
    );
    let script = std::fs::read_to_string(repo().join("hack/image/build.sh")).expect("build.sh");
    for part in [
        r#"bin="$(hack/image/binary.sh)""#,
        r#"hack/image/rootfs.sh "$bin""#,
        "--image hack/image/kdoctor.json",
    ] {
        assert!(script.contains(part), "build.sh lacks {part}");
    }
    // The image is that root filesystem and nothing else.
    assert_eq!(
        &runtime[..2],
        ["FROM scratch", "COPY --from=build /rootfs/ /"],
        "{runtime:?}"
    );
    let value = |instruction: &str| -> &str {
        runtime
            .iter()
            .find_map(|l| l.strip_prefix(instruction))
            .unwrap_or_else(|| panic!("no {instruction}in the last stage"))
    };
    assert_eq!(value("USER "), spec["user"].as_str().expect("user"));
    let entrypoint: serde_json::Value = serde_json::from_str(value("ENTRYPOINT ")).expect("exec");
    assert_eq!(entrypoint, spec["entrypoint"]);
    let env: Vec<String> = value("ENV ").split(' ').map(String::from).collect();
    assert_eq!(env, strings(&spec["env"]));
    let ports: BTreeSet<String> = value("EXPOSE ").split(' ').map(String::from).collect();
    assert_eq!(ports, strings(&spec["exposedPorts"]).into_iter().collect());
    // Every port the manifests open is exposed.
    for file in ["manifests/agent.yaml", "manifests/controller.yaml"] {
        let manifest = std::fs::read_to_string(repo().join(file)).expect("manifest");
        for line in manifest.lines() {
            let Some(port) = line.split("containerPort: ").nth(1) else {
                continue;
            };
            let port: String = port.chars().take_while(char::is_ascii_digit).collect();
            let protocol = if line.contains("protocol: UDP") {
                "udp"
            } else {
                "tcp"
            };
            let exposed = format!("{port}/{protocol}");
            assert!(ports.contains(&exposed), "{file}: {exposed}");
        }
    }
}

/// One entry of a tar archive.
struct Entry {
    name: String,
    mode: u32,
    data: Vec<u8>,
}

/// The entries of an uncompressed tar (ustar and PAX headers; PAX records are skipped, the
/// layer needs none).
fn entries(tar: &[u8]) -> Vec<Entry> {
    let octal = |field: &[u8]| -> usize {
        let text = String::from_utf8_lossy(field);
        usize::from_str_radix(text.trim_matches(|c: char| c == '\0' || c == ' '), 8).unwrap_or(0)
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let header = &tar[at..at + 512];
        let size = octal(&header[124..136]);
        let name = |range: std::ops::Range<usize>| {
            String::from_utf8_lossy(&header[range])
                .trim_end_matches('\0')
                .to_string()
        };
        let (prefix, base) = (name(345..500), name(0..100));
        let data = tar[at + 512..at + 512 + size].to_vec();
        if !matches!(header[156], b'x' | b'g') {
            out.push(Entry {
                name: if prefix.is_empty() {
                    base
                } else {
                    format!("{prefix}/{base}")
                },
                mode: octal(&header[100..108]) as u32,
                data,
            });
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    out
}

fn blob(layout: &Path, digest: &serde_json::Value) -> Vec<u8> {
    let digest = digest.as_str().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("sha256");
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex)).expect("blob");
    assert_eq!(
        format!("{:x}", sha2::Sha256::digest(&bytes)),
        hex,
        "{digest}"
    );
    bytes
}

/// The image built under target/image/<image>, checked against its description: the name it is
/// imported as, user, entrypoint, environment, ports, one layer matching its digests and holding
/// exactly the listed files. `None` (and MISSING) when it is not built.
fn built(image: &str, tag: &str) -> Option<(serde_json::Value, Vec<Entry>)> {
    let layout = repo().join("target/image").join(image);
    if !layout.join("index.json").exists() {
        kube_sim::testcluster::missing(
            &format!("the built {image} image's check"),
            &format!(
                "target/image/{image} is not built (hack/image/build.sh; hack/test.sh runs it first)"
            ),
        );
        return None;
    }
    let spec = description(image);
    let json = |bytes: &[u8]| -> serde_json::Value { serde_json::from_slice(bytes).expect("JSON") };
    let index = json(&std::fs::read(layout.join("index.json")).expect("index"));
    let descriptor = &index["manifests"][0];
    assert_eq!(
        descriptor["annotations"]["io.containerd.image.name"],
        format!("{}:{tag}", spec["name"].as_str().expect("name"))
    );
    let manifest = json(&blob(&layout, &descriptor["digest"]));
    let config = json(&blob(&layout, &manifest["config"]["digest"]));
    assert_eq!(config["config"]["User"], spec["user"]);
    assert_eq!(config["config"]["Entrypoint"], spec["entrypoint"]);
    assert_eq!(config["config"]["Env"], spec["env"]);
    let ports: Vec<String> = config["config"]["ExposedPorts"]
        .as_object()
        .expect("ports")
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        ports.into_iter().collect::<BTreeSet<_>>(),
        strings(&spec["exposedPorts"]).into_iter().collect()
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer");
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(blob(&layout, &layers[0]["digest"]).as_slice())
        .read_to_end(&mut tar)
        .expect("gzip");
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!("sha256:{:x}", sha2::Sha256::digest(&tar))
    );
    let entries = entries(&tar);
    let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names, strings(&spec["files"]));
    Some((spec, entries))
}

#[test]
fn the_built_image_holds_exactly_its_description_and_runs_alone() {
    let Some((spec, entries)) = built("kdoctor", env!("CARGO_PKG_VERSION")) else {
        return;
    };
    let mode = |name: &str| entries.iter().find(|e| e.name == name).map(|e| e.mode);
    assert_eq!(mode("usr/bin/kdoctor"), Some(0o755));
    assert_eq!(mode("tmp/"), Some(0o1777));

    // Unpacked alone and run as the image's user: the binary needs no file the image lacks.
    // /proc/self belongs to the effective user.
    let root_user = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    if !root_user {
        kube_sim::testcluster::missing(
            "running the image's binary in its own root filesystem",
            "chroot needs root",
        );
        return;
    }
    let root = scratch("image-rootfs");
    for entry in &entries {
        let path = root.join(&entry.name);
        if entry.name.ends_with('/') {
            std::fs::create_dir_all(&path).expect("dir");
        } else {
            std::fs::write(&path, &entry.data).expect("file");
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(entry.mode)).expect("mode");
    }
    let output = std::process::Command::new("chroot")
        .arg(format!(
            "--userspec={}",
            spec["user"].as_str().expect("user")
        ))
        .arg(&root)
        .args(["/usr/bin/kdoctor", "--version"])
        .output()
        .expect("chroot runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("kdoctor {}", env!("CARGO_PKG_VERSION"))
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The pause image holds one static program that waits, and exits 0 on SIGTERM (as process 1 of
/// a pod, a signal without a handler would be ignored).
#[test]
fn the_pause_image_waits_and_exits_on_sigterm() {
    let Some((_, entries)) = built("pause", "3.10") else {
        return;
    };
    let program = entries.iter().find(|e| e.name == "pause").expect("pause");
    assert_eq!(program.mode, 0o755);
    let dir = scratch("pause");
    let path = dir.join("pause");
    std::fs::write(&path, &program.data).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("mode");
    let mut child = std::process::Command::new(&path).spawn().expect("runs");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "pause exited by itself"
    );
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}
