//! The krew manifest (`.krew.yaml`): rendered by `hack/krew-manifest.sh` for an archive made by
//! `hack/release-archive.sh` from the built binary, checked against krew's manifest rules, and
//! installed the way krew installs it (unpack, copy `files`, link `kubectl-<name>` to `bin`),
//! after which kubectl 1.32 finds and runs the plugin.

use std::path::Path;
use std::process::Command;

use serde_yaml_ng::Value;

use crate::support::{kubectl_bin, repo, scratch};

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut at = v;
    for key in path {
        at = &at[*key];
    }
    at.as_str()
        .unwrap_or_else(|| panic!("{} is not a string", path.join(".")))
}

#[test]
fn the_krew_manifest_installs_the_release_archive_as_kubectl_kdoctor() {
    let dir = scratch("krew");
    let archives = dir.join("release");
    let printed = run(Command::new(repo().join("hack/release-archive.sh"))
        .arg(env!("CARGO_BIN_EXE_kdoctor"))
        .arg(&archives));
    let archive = archives.join("kdoctor-linux-amd64.tar.gz");
    let digest = run(Command::new("sha256sum").arg(&archive));
    let digest = digest.split_whitespace().next().expect("digest");
    assert!(printed.contains(digest), "{printed}");

    let rendered = run(Command::new(repo().join("hack/krew-manifest.sh"))
        .arg("v0.1.0")
        .arg(&archives));
    assert!(!rendered.contains("{{"), "{rendered}");
    let manifest: Value = serde_yaml_ng::from_str(&rendered).expect("the manifest is YAML");

    // krew's rules: the kind, a name equal to the file name krew-index keeps it under, a
    // version with its `v`, a short description of a few words, and per platform a selector,
    // an https address, the archive's sha256 and a `bin` the archive holds.
    assert_eq!(
        text(&manifest, &["apiVersion"]),
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(text(&manifest, &["kind"]), "Plugin");
    assert_eq!(text(&manifest, &["metadata", "name"]), "kdoctor");
    let spec = &manifest["spec"];
    assert_eq!(text(spec, &["version"]), "v0.1.0");
    assert!(text(spec, &["homepage"]).starts_with("https://"));
    let short = text(spec, &["shortDescription"]);
    assert!(!short.is_empty() && short.len() <= 50, "{short:?}");
    assert!(!text(spec, &["description"]).trim().is_empty());
    let platforms = spec["platforms"].as_sequence().expect("platforms");
    assert_eq!(platforms.len(), 1);
    let platform = &platforms[0];
    assert_eq!(text(platform, &["selector", "matchLabels", "os"]), "linux");
    assert_eq!(
        text(platform, &["selector", "matchLabels", "arch"]),
        "amd64"
    );
    let uri = text(platform, &["uri"]);
    assert!(
        uri.starts_with("https://") && uri.ends_with("/v0.1.0/kdoctor-linux-amd64.tar.gz"),
        "{uri}"
    );
    assert_eq!(text(platform, &["sha256"]), digest);

    // Install as krew does: unpack, copy each `files` entry, link kubectl-<name> to `bin`.
    let unpacked = dir.join("unpacked");
    let install = dir.join("store/kdoctor/v0.1.0");
    let bin_dir = dir.join("bin");
    for d in [&unpacked, &install, &bin_dir] {
        std::fs::create_dir_all(d).expect("dir");
    }
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked));
    for file in platform["files"].as_sequence().expect("files") {
        let from = unpacked.join(text(file, &["from"]));
        let to = install.join(text(file, &["to"]));
        let name = from.file_name().expect("file name");
        std::fs::copy(&from, to.join(name))
            .unwrap_or_else(|e| panic!("the archive holds {}: {e}", from.display()));
    }
    let bin = install.join(text(platform, &["bin"]));
    assert!(is_executable(&bin), "{} is not executable", bin.display());
    std::os::unix::fs::symlink(&bin, bin_dir.join("kubectl-kdoctor")).expect("link");

    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let listed = run(Command::new(kubectl_bin())
        .args(["plugin", "list"])
        .env("PATH", &path));
    assert!(listed.contains("kubectl-kdoctor"), "{listed}");
    let help = run(Command::new(kubectl_bin())
        .args(["kdoctor", "--help"])
        .env("PATH", &path));
    assert!(help.contains("kubectl kdoctor"), "{help}");
    assert!(help.contains("matrix"), "{help}");

    // A release without its archive renders nothing.
    let missing = Command::new(repo().join("hack/krew-manifest.sh"))
        .arg("v0.1.0")
        .arg(dir.join("nothing"))
        .output()
        .expect("runs");
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("kdoctor-linux-amd64.tar.gz is missing"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}
