#!/usr/bin/env python3
"""Packs a root filesystem into an OCI image, without a daemon or a registry.

    hack/image/oci.py --rootfs DIR --image hack/image/kdoctor.json --tag 0.1.0 --out target/image/kdoctor

Writes the OCI layout directory OUT/ (oci-layout, index.json, blobs/sha256/...) and the archive
OUT.oci.tar that `ctr images import` and `skopeo copy oci-archive:` read. One gzip layer, built
reproducibly: entries sorted, owned by 0:0, modification time 0, gzip without a timestamp, so the
same files give the same digests. The files must be exactly the image description's "files"
list, and the config takes its user, entrypoint, environment and exposed ports.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import sys
import tarfile


def layer(rootfs):
    """The uncompressed layer tar of rootfs, and the names in it."""
    names = []
    for top, dirs, files in os.walk(rootfs):
        dirs.sort()
        rel = os.path.relpath(top, rootfs)
        for d in dirs:
            names.append((os.path.normpath(os.path.join(rel, d)), True))
        for f in sorted(files):
            names.append((os.path.normpath(os.path.join(rel, f)), False))
    names.sort()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, is_dir in names:
            path = os.path.join(rootfs, name)
            st = os.lstat(path)
            info = tarfile.TarInfo(name + "/" if is_dir else name)
            info.mode = stat.S_IMODE(st.st_mode)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if is_dir:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                sys.exit(f"oci.py: {name} is neither a file nor a directory")
    listed = [n + "/" if d else n for n, d in names]
    return buf.getvalue(), listed


def put(blobs, data):
    """Stores data as a blob; its descriptor's digest and size."""
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return f"sha256:{digest}", len(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", required=True)
    parser.add_argument("--image", required=True, help="the image description (JSON)")
    parser.add_argument("--tag", help="default: the description's tag")
    parser.add_argument("--out", required=True, help="the layout directory; OUT.oci.tar beside it")
    args = parser.parse_args()

    with open(args.image) as f:
        spec = json.load(f)
    tag = args.tag or spec.get("tag")
    if not tag:
        sys.exit("oci.py: no --tag and no tag in the description")
    tar, listed = layer(args.rootfs)
    if listed != sorted(spec["files"]):
        sys.exit(
            "oci.py: the root filesystem is not what the description lists\n"
            f"  extra:   {sorted(set(listed) - set(spec['files']))}\n"
            f"  missing: {sorted(set(spec['files']) - set(listed))}"
        )

    shutil.rmtree(args.out, ignore_errors=True)
    blobs = os.path.join(args.out, "blobs", "sha256")
    os.makedirs(blobs)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    gz = gzip.compress(tar, compresslevel=9, mtime=0)
    layer_digest, layer_size = put(blobs, gz)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {
            "User": spec["user"],
            "Entrypoint": spec["entrypoint"],
            "Env": spec["env"],
            "ExposedPorts": {p: {} for p in spec["exposedPorts"]},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "hack/image/build.sh"}],
    }
    config_digest, config_size = put(blobs, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    manifest_digest, manifest_size = put(blobs, json.dumps(manifest, sort_keys=True).encode())
    name = f"{spec['name']}:{tag}"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "platform": {"architecture": arch, "os": "linux"},
                # containerd names the image it imports by the first; OCI tools by the second.
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True)
    with open(os.path.join(args.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)

    archive = args.out.rstrip("/") + ".oci.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as out:
        for entry in ["oci-layout", "index.json", "blobs"]:
            out.add(os.path.join(args.out, entry), arcname=entry, filter=_owned_by_root)
    print(
        f"{name}: {manifest_digest}, layer {layer_size:,} bytes compressed, "
        f"{len(tar):,} bytes unpacked -> {archive}"
    )


def _owned_by_root(info):
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


if __name__ == "__main__":
    main()
