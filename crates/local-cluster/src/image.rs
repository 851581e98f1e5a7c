//! Container images: the operator's, written without Docker as an OCI image
//! layout in a tar file, byte for byte the same from the same inputs (so the same digest).
//!
//! The operator's rootfs holds nothing of the host's: a statically linked binary at
//! `/sample-operator` (musl's, whose resolver reads `/etc/hosts`, where a Pod's `hostAliases`
//! go, before the DNS servers of `/etc/resolv.conf`, with no configuration in the image), a
//! non-root user 65532, `/tmp`, and Mozilla's root certificates from the `webpki-root-certs`
//! crate, pinned by Cargo.lock, rather than the host's CA bundle. The test
//! images (a busybox shell, and the pause image every Pod sandbox runs) come from Debian's
//! busybox-static the same way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

fn image_error(message: impl Into<String>) -> Error {
    Error::Image(message.into())
}

/// The user the image runs as: distroless' `nonroot`, which the chart's securityContext names.
pub const NONROOT: u32 = 65532;

/// One file or folder of the root filesystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Dir { mode: u32, owner: u32 },
    File { mode: u32, contents: Vec<u8> },
    Symlink { target: String },
}

/// A root filesystem by path (relative, no leading slash); parents are added when written.
#[derive(Clone, Debug, Default)]
pub struct Rootfs {
    entries: BTreeMap<String, Entry>,
}

impl Rootfs {
    pub fn file(&mut self, path: &str, mode: u32, contents: Vec<u8>) -> &mut Self {
        self.entries.insert(clean(path), Entry::File { mode, contents });
        self
    }

    pub fn dir(&mut self, path: &str, mode: u32, owner: u32) -> &mut Self {
        self.entries.insert(clean(path), Entry::Dir { mode, owner });
        self
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.entries.insert(
            clean(path),
            Entry::Symlink {
                target: target.to_owned(),
            },
        );
        self
    }

    /// The files every image here has: a passwd and group naming root and nonroot, and `/tmp`.
    fn base() -> Self {
        let mut fs = Self::default();
        fs.file(
            "etc/passwd",
            0o644,
            format!(
                "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
            )
            .into_bytes(),
        )
        .file(
            "etc/group",
            0o644,
            format!("root:x:0:\nnonroot:x:{NONROOT}:\n").into_bytes(),
        )
        .dir("tmp", 0o1777, 0)
        .dir("home/nonroot", 0o700, NONROOT);
        fs
    }

    /// The layer: an uncompressed tar with sorted entries, every parent folder listed before its
    /// children, and nothing that varies between builds (times 0, owners numeric, no user
    /// names).
    pub fn to_tar(&self) -> Result<Vec<u8>> {
        let mut all = self.entries.clone();
        for path in self.entries.keys() {
            let mut parent = Path::new(path).parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                all.entry(p.to_string_lossy().into_owned()).or_insert(Entry::Dir {
                    mode: 0o755,
                    owner: 0,
                });
                parent = p.parent();
            }
        }
        let mut builder = tar::Builder::new(Vec::new());
        // BTreeMap order puts "a" before "a/b": parents come first.
        for (path, entry) in &all {
            let mut header = tar::Header::new_ustar();
            header.set_mtime(0);
            header.set_gid(0);
            match entry {
                Entry::Dir { mode, owner } => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(*mode);
                    header.set_uid((*owner).into());
                    header.set_gid((*owner).into());
                    header.set_size(0);
                    builder
                        .append_data(&mut header, format!("{path}/"), std::io::empty())
                        .map_err(tar_error)?;
                }
                Entry::File { mode, contents } => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(*mode);
                    header.set_uid(0);
                    header.set_size(contents.len() as u64);
                    builder
                        .append_data(&mut header, path, contents.as_slice())
                        .map_err(tar_error)?;
                }
                Entry::Symlink { target } => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(0o777);
                    header.set_uid(0);
                    header.set_size(0);
                    builder
                        .append_link(&mut header, path, target)
                        .map_err(tar_error)?;
                }
            }
        }
        builder.into_inner().map_err(tar_error)
    }
}

fn tar_error(e: std::io::Error) -> Error {
    image_error(format!("writing a tar: {e}"))
}

fn json_bytes(value: &serde_json::Value) -> Vec<u8> {
    // Serialising a `Value` cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

fn clean(path: &str) -> String {
    path.trim_start_matches('/').trim_end_matches('/').to_owned()
}

/// What the image runs and how it is named.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    /// The full reference containerd records, such as `docker.io/library/sample-operator:0.1.0`.
    pub name: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub user: String,
}

/// A written image: its manifest's digest and the layout tar.
#[derive(Clone, Debug)]
pub struct Image {
    pub name: String,
    pub digest: String,
    pub tar: Vec<u8>,
}

fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`) of one single-layer
/// image, as a tar that `ctr images import` takes; the index names the image with the
/// annotation containerd reads.
pub fn write_image(rootfs: &Rootfs, spec: &ImageSpec) -> Result<Image> {
    let layer = rootfs.to_tar()?;
    let layer_digest = sha256(&layer);
    let config = json_bytes(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": spec.user,
            "Entrypoint": spec.entrypoint,
            "Cmd": spec.cmd,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
        },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    }));
    let config_digest = sha256(&config);
    let manifest = json_bytes(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    }));
    let manifest_digest = sha256(&manifest);
    let (repository, tag) = spec
        .name
        .rsplit_once(':')
        .unwrap_or((spec.name.as_str(), "latest"));
    // Named twice: by tag, and by digest as a Pod that pins `image@sha256:…` asks for it
    // (containerd records a digest name only for what it pulled itself).
    let by_digest = format!("{repository}@{manifest_digest}");
    let entry = |name: &str, ref_name: &str| {
        json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": { "architecture": "amd64", "os": "linux" },
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": ref_name,
            },
        })
    };
    let index = json_bytes(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [entry(&spec.name, tag), entry(&by_digest, &manifest_digest)],
    }));
    let mut layout = Rootfs::default();
    layout.file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec());
    layout.file("index.json", 0o644, index);
    for blob in [layer, config, manifest] {
        let digest = sha256(&blob);
        let hex = digest.trim_start_matches("sha256:");
        layout.file(&format!("blobs/sha256/{hex}"), 0o644, blob);
    }
    Ok(Image {
        name: spec.name.clone(),
        digest: manifest_digest,
        tar: layout.to_tar()?,
    })
}

/// The libraries `ldd` says a dynamic binary loads, with the loader, as (path in the image, path
/// on this machine). A static binary has none.
fn linked_libraries(binary: &Path) -> Result<Vec<(String, PathBuf)>> {
    let output = Command::new("ldd").arg(binary).output().map_err(|e| {
        image_error(format!(
            "running ldd (Debian's libc-bin) to find the libraries {} links: {e}",
            binary.display()
        ))
    })?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        if text.contains("not a dynamic executable")
            || String::from_utf8_lossy(&output.stderr).contains("not a dynamic")
        {
            return Ok(Vec::new());
        }
        return Err(image_error(format!(
            "ldd {}: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    parse_ldd(&text)
}

fn parse_ldd(text: &str) -> Result<Vec<(String, PathBuf)>> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim) {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)", "/lib64/ld-linux-x86-64.so.2 (0x…)",
        // and the kernel's "linux-vdso.so.1 (0x…)", which is no file.
        let path = match line.split_once("=>") {
            Some((name, rest)) => {
                let path = rest.split_whitespace().next().unwrap_or("");
                if path == "not" {
                    return Err(image_error(format!("ldd: {} is not found", name.trim())));
                }
                path
            }
            None => line.split_whitespace().next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libs.push((path.to_owned(), PathBuf::from(path)));
        }
    }
    Ok(libs)
}

/// The operator's root filesystem around `binary`, which must be static: a library from this
/// host would make the image depend on the host's packages.
pub fn operator_rootfs(binary: &Path) -> Result<Rootfs> {
    let libraries = linked_libraries(binary)?;
    if !libraries.is_empty() {
        return Err(image_error(format!(
            "{} loads libraries ({}): the operator's image takes a statically linked binary, as `cargo xtask image` builds it",
            binary.display(),
            libraries
                .iter()
                .map(|(path, _)| path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut fs = Rootfs::base();
    let contents = std::fs::read(binary).map_err(|e| Error::io(binary, e))?;
    fs.file("sample-operator", 0o755, contents)
        // Neutron's and Keystone's TLS certificates are checked against these roots.
        .file("etc/ssl/certs/ca-certificates.crt", 0o644, root_certificates());
    Ok(fs)
}

/// Mozilla's root certificates as a PEM bundle, from the `webpki-root-certs` crate.
fn root_certificates() -> Vec<u8> {
    use base64::Engine;
    let mut pem = String::new();
    for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        let encoded = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem.into_bytes()
}

fn add_libraries(fs: &mut Rootfs, binary: &Path) -> Result<()> {
    for (in_image, on_host) in linked_libraries(binary)? {
        // The loader and libraries are often links: the image gets the file itself.
        let real = std::fs::canonicalize(&on_host).map_err(|e| Error::io(&on_host, e))?;
        fs.file(
            &in_image,
            0o755,
            std::fs::read(&real).map_err(|e| Error::io(&real, e))?,
        );
    }
    Ok(())
}

/// Debian's busybox-static with a few applets linked: `sh`, `sleep`, `ip`, `cat`, `ls`, `ping`.
pub fn busybox_rootfs() -> Result<Rootfs> {
    let busybox = Path::new("/bin/busybox");
    if !busybox.is_file() {
        return Err(image_error(
            "/bin/busybox is missing: install Debian's busybox-static",
        ));
    }
    let mut fs = Rootfs::base();
    fs.file(
        "bin/busybox",
        0o755,
        std::fs::read(busybox).map_err(|e| Error::io(busybox, e))?,
    );
    add_libraries(&mut fs, busybox)?;
    for applet in ["sh", "sleep", "ip", "cat", "ls", "ping", "true"] {
        fs.symlink(&format!("bin/{applet}"), "busybox");
    }
    Ok(fs)
}

/// The reference the chart's Pods ask for: the CRI expands `sample-operator:0.1.0` to this.
pub fn operator_reference(version: &str) -> String {
    format!("docker.io/library/sample-operator:{version}")
}
/// The test shell, for Pods the tests start on the real node.
pub const BUSYBOX: &str = "localhost/sample-operator/busybox:1";
/// The sandbox image containerd is told to use; it only has to sleep.
pub const PAUSE: &str = "localhost/sample-operator/pause:1";

/// The operator's image around the static `binary`: entrypoint, arguments and user.
pub fn operator_image(binary: &Path, version: &str) -> Result<Image> {
    write_image(
        &operator_rootfs(binary)?,
        &ImageSpec {
            name: operator_reference(version),
            entrypoint: vec!["/sample-operator".into()],
            cmd: vec!["run".into(), "--leader-elect".into()],
            user: format!("{NONROOT}:{NONROOT}"),
        },
    )
}

/// A shell for test Pods (root, since tests look at interfaces).
pub fn busybox_image(busybox: &Rootfs) -> Result<Image> {
    write_image(
        busybox,
        &ImageSpec {
            name: BUSYBOX.into(),
            entrypoint: Vec::new(),
            cmd: vec!["/bin/sh".into()],
            user: "0:0".into(),
        },
    )
}

/// The sandbox image: it sleeps until killed, as nobody.
pub fn pause_image(busybox: &Rootfs) -> Result<Image> {
    write_image(
        busybox,
        &ImageSpec {
            name: PAUSE.into(),
            entrypoint: vec!["/bin/sleep".into(), "2147483647".into()],
            cmd: Vec::new(),
            user: format!("{NONROOT}:{NONROOT}"),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Rootfs {
        let mut fs = Rootfs::base();
        fs.file("sample-operator", 0o755, b"\x7fELF not really".to_vec())
            .symlink("bin/sh", "busybox");
        fs
    }

    fn spec() -> ImageSpec {
        ImageSpec {
            name: "docker.io/library/sample-operator:0.1.0".into(),
            entrypoint: vec!["/sample-operator".into()],
            cmd: vec!["run".into()],
            user: "65532:65532".into(),
        }
    }

    #[test]
    fn the_same_input_gives_the_same_digest_and_bytes() {
        let a = write_image(&sample(), &spec()).unwrap();
        let b = write_image(&sample(), &spec()).unwrap();
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.tar, b.tar);
        let mut other = sample();
        other.file("sample-operator", 0o755, b"another binary".to_vec());
        assert_ne!(write_image(&other, &spec()).unwrap().digest, a.digest);
    }

    #[test]
    fn the_layer_lists_parents_first_with_fixed_times_and_owners() {
        let tar = sample().to_tar().unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let header = entry.header();
            assert_eq!(header.mtime().unwrap(), 0);
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            if path == "home/nonroot/" {
                assert_eq!(header.uid().unwrap(), u64::from(NONROOT));
            } else {
                assert_eq!(header.uid().unwrap(), 0, "{path}");
            }
            seen.push(path);
        }
        let position = |p: &str| {
            seen.iter()
                .position(|s| s == p)
                .unwrap_or_else(|| panic!("{p} in {seen:?}"))
        };
        assert!(position("bin/") < position("bin/sh"));
        assert!(position("home/") < position("home/nonroot/"));
        assert!(seen.contains(&"etc/passwd".to_owned()));
    }

    #[test]
    fn the_layout_holds_every_blob_its_index_names() {
        let image = write_image(&sample(), &spec()).unwrap();
        let mut archive = tar::Archive::new(image.tar.as_slice());
        let mut files = BTreeMap::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            files.insert(path, bytes);
        }
        let blob = |digest: &str| {
            let bytes = &files[&format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"))];
            assert_eq!(sha256(bytes), digest);
            bytes.clone()
        };
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let entry = &index["manifests"][0];
        assert_eq!(entry["digest"], image.digest.as_str());
        assert_eq!(
            entry["annotations"]["io.containerd.image.name"],
            "docker.io/library/sample-operator:0.1.0"
        );
        let by_digest = &index["manifests"][1];
        assert_eq!(by_digest["digest"], image.digest.as_str());
        assert_eq!(
            by_digest["annotations"]["io.containerd.image.name"],
            format!("docker.io/library/sample-operator@{}", image.digest)
        );
        let manifest: serde_json::Value = serde_json::from_slice(&blob(&image.digest)).unwrap();
        let config: serde_json::Value =
            serde_json::from_slice(&blob(manifest["config"]["digest"].as_str().unwrap())).unwrap();
        assert_eq!(config["config"]["User"], "65532:65532");
        let layer_digest = manifest["layers"][0]["digest"].as_str().unwrap();
        blob(layer_digest);
        assert_eq!(config["rootfs"]["diff_ids"][0], layer_digest);
    }

    /// Debian's busybox-static stands in for the operator's static build (the tests' image is
    /// built by `cargo xtask test`); the host's `sh` is linked dynamically.
    fn static_binary(test: &str) -> Option<&'static Path> {
        let busybox = Path::new("/bin/busybox");
        if busybox.is_file() {
            return Some(busybox);
        }
        crate::testing::skipped(test, "/bin/busybox is missing: install Debian's busybox-static");
        None
    }

    #[test]
    fn the_operators_image_holds_a_static_binary_and_nothing_of_the_hosts() {
        let dynamic = operator_rootfs(Path::new("/bin/sh")).unwrap_err().to_string();
        assert!(dynamic.contains("statically linked"), "{dynamic}");
        let Some(binary) =
            static_binary("image::tests::the_operators_image_holds_a_static_binary_and_nothing_of_the_hosts")
        else {
            return;
        };
        let fs = operator_rootfs(binary).unwrap();
        let paths: Vec<&str> = fs.entries.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "etc/group",
                "etc/passwd",
                "etc/ssl/certs/ca-certificates.crt",
                "home/nonroot",
                "sample-operator",
                "tmp"
            ]
        );
        // The crate's roots, every one a certificate openssl reads.
        let Entry::File { contents, .. } = &fs.entries["etc/ssl/certs/ca-certificates.crt"] else {
            panic!("the CA bundle is a file");
        };
        let dir = std::env::temp_dir().join(format!("image-roots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bundle = dir.join("roots.pem");
        std::fs::write(&bundle, contents).unwrap();
        let subjects = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl crl2pkcs7 -nocrl -certfile {} | openssl pkcs7 -print_certs -noout | grep -c '^subject='",
                bundle.display()
            ))
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let read: usize = String::from_utf8_lossy(&subjects.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        assert_eq!(read, webpki_root_certs::TLS_SERVER_ROOT_CERTS.len());
        assert!(read > 100, "{read} roots");
    }

    /// What a user pushes with an OCI tool is the image the tests ran: skopeo reads the layout,
    /// and its copy with `--preserve-digests` keeps the manifest (without, it writes another), so
    /// the digest printed is the digest pushed.
    #[test]
    fn skopeo_reads_the_image_and_keeps_its_digest() {
        const TEST: &str = "image::tests::skopeo_reads_the_image_and_keeps_its_digest";
        let Some(binary) = static_binary(TEST) else {
            return;
        };
        if Command::new("skopeo").arg("--version").output().is_err() {
            crate::testing::skipped(TEST, "skopeo is missing: install Debian's skopeo");
            return;
        }
        let image = operator_image(binary, "0.1.0").unwrap();
        let dir = std::env::temp_dir().join(format!("image-skopeo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tar = dir.join("image.oci.tar");
        std::fs::write(&tar, &image.tar).unwrap();
        let source = format!("oci-archive:{}:0.1.0", tar.display());
        let skopeo = |args: &[&str]| {
            let output = Command::new("skopeo")
                .arg("--insecure-policy")
                .args(args)
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "skopeo {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            output.stdout
        };
        let manifest = skopeo(&["inspect", "--raw", &source]);
        assert_eq!(sha256(&manifest), image.digest);
        let copy = format!("oci:{}:0.1.0", dir.join("copy").display());
        skopeo(&["copy", "--quiet", "--preserve-digests", &source, &copy]);
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("copy/index.json")).unwrap()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(index["manifests"][0]["digest"], image.digest.as_str());
    }

    #[test]
    fn ldd_output_gives_library_paths_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        let libs: Vec<String> = parse_ldd(text).unwrap().into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            libs,
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(parse_ldd("\tlibfoo.so => not found\n").is_err());
    }
}
