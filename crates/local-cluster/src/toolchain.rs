//! Builds the control-plane binaries from the pinned Go wrapper modules under `toolchain/`.
//!
//! Each wrapper module pins one upstream release; the version read from its `go.mod` names the
//! cache folder, so a second build of the same version is a no-op and a version bump builds anew.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::paths;

/// One Go wrapper module and the commands it builds.
struct Module {
    /// Names the cache folder and the progress lines.
    name: &'static str,
    /// Folder under `toolchain/`.
    dir: &'static str,
    /// The module whose version names the cache folder.
    pinned: &'static str,
    /// Packages to build; the binary takes the last path element's name.
    packages: &'static [&'static str],
    /// Go build tags.
    tags: &'static str,
    /// Whether the build needs cgo (runc's namespace setup is C).
    cgo: bool,
}

/// The control plane's tags: SELinux support compiled in as upstream's release builds do, and
/// no test-only code paths.
const CONTROL_PLANE_TAGS: &str = "selinux,notest";

const KUBERNETES: Module = Module {
    name: "kubernetes",
    dir: "kubernetes",
    pinned: "k8s.io/kubernetes",
    packages: &[
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubectl",
    ],
    tags: CONTROL_PLANE_TAGS,
    cgo: false,
};
const ETCD: Module = Module {
    name: "etcd",
    dir: "etcd",
    pinned: "go.etcd.io/etcd/server/v3",
    packages: &["."],
    tags: CONTROL_PLANE_TAGS,
    cgo: false,
};
const KWOK: Module = Module {
    name: "kwok",
    dir: "kwok",
    pinned: "sigs.k8s.io/kwok",
    packages: &["sigs.k8s.io/kwok/cmd/kwok"],
    tags: CONTROL_PLANE_TAGS,
    cgo: false,
};

/// Only the Helm chart's test needs it, so it is built on demand rather than with the cluster.
const HELM: Module = Module {
    name: "helm",
    dir: "helm",
    pinned: "helm.sh/helm/v4",
    packages: &["helm.sh/helm/v4/cmd/helm"],
    tags: CONTROL_PLANE_TAGS,
    cgo: false,
};

/// Nothing is built from it: the chart's test installs the CRDs its module ships.
const PROMETHEUS_OPERATOR: Module = Module {
    name: "prometheus-operator",
    dir: "prometheus-operator",
    pinned: "github.com/prometheus-operator/prometheus-operator",
    packages: &[],
    tags: "",
    cgo: false,
};

/// Nothing is built from it either: the chart's test installs cert-manager's CRDs, so that the
/// chart's Certificate is validated as cert-manager's API server schema validates it.
const CERT_MANAGER: Module = Module {
    name: "cert-manager",
    dir: "cert-manager",
    pinned: "github.com/cert-manager/cert-manager",
    packages: &[],
    tags: "",
    cgo: false,
};

/// Prometheus and promtool, for the chart's alerting rules (`promtool check rules`, `promtool
/// test rules`) and for a test in which a real Prometheus scrapes the operator. Built without
/// any service discovery but static files (`remove_all_sd`), which halves the build: the test
/// scrapes a fixed loopback address.
const PROMETHEUS: Module = Module {
    name: "prometheus",
    dir: "prometheus",
    pinned: "github.com/prometheus/prometheus",
    packages: &[
        "github.com/prometheus/prometheus/cmd/prometheus",
        "github.com/prometheus/prometheus/cmd/promtool",
    ],
    tags: "remove_all_sd",
    cgo: false,
};

/// kube-score, the linter the chart's rendered manifests pass (kube-linter's module host is
/// not reachable through the Go module proxy here).
const KUBE_SCORE: Module = Module {
    name: "kube-score",
    dir: "kube-score",
    pinned: "github.com/zegl/kube-score",
    packages: &["github.com/zegl/kube-score/cmd/kube-score"],
    tags: "",
    cgo: false,
};

/// kubernetes/sample-controller, unchanged, from the benchmark's Go module (`bench/go/`): the
/// test of switching from it runs the very release the benchmark compares with.
const SAMPLE_CONTROLLER: Module = Module {
    name: "sample-controller",
    dir: "../bench/go",
    pinned: "k8s.io/sample-controller",
    packages: &["k8s.io/sample-controller"],
    tags: "",
    cgo: false,
};

/// The node agents of `cluster up --real-node`, from the same Kubernetes release as the control
/// plane (the same wrapper module, so the same pinned dependencies); cached apart so that the
/// control plane does not rebuild when only they are wanted.
const KUBERNETES_NODE: Module = Module {
    name: "kubernetes-node",
    dir: "kubernetes",
    pinned: "k8s.io/kubernetes",
    packages: &[
        "k8s.io/kubernetes/cmd/kubelet",
        "k8s.io/kubernetes/cmd/kube-proxy",
    ],
    tags: CONTROL_PLANE_TAGS,
    cgo: false,
};

/// The container runtime the kubelet talks to (CRI), with its command line and the shim.
const CONTAINERD: Module = Module {
    name: "containerd",
    dir: "containerd",
    pinned: "github.com/containerd/containerd/v2",
    packages: &[
        "github.com/containerd/containerd/v2/cmd/containerd",
        "github.com/containerd/containerd/v2/cmd/ctr",
        "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
    ],
    tags: "",
    cgo: false,
};

/// runc's nsexec is C, and without seccomp support the chart's `RuntimeDefault` profile cannot
/// be honoured, hence cgo and libseccomp (Debian's libseccomp-dev).
const RUNC: Module = Module {
    name: "runc",
    dir: "runc",
    pinned: "github.com/opencontainers/runc",
    packages: &["github.com/opencontainers/runc"],
    tags: "seccomp",
    cgo: true,
};

/// The CNI plugins the node's pod network and the Network controller's attachment definitions
/// use: a bridge with host-local addresses, and the loopback every sandbox needs.
const CNI_PLUGINS: Module = Module {
    name: "cni-plugins",
    dir: "cni-plugins",
    pinned: "github.com/containernetworking/plugins",
    packages: &[
        "github.com/containernetworking/plugins/plugins/main/bridge",
        "github.com/containernetworking/plugins/plugins/main/loopback",
        "github.com/containernetworking/plugins/plugins/ipam/host-local",
    ],
    tags: "",
    cgo: false,
};

/// Multus' thin plugin, which reads the NetworkAttachmentDefinitions the Multus backend writes.
/// Its module lives at gopkg.in: the github.com path is not served by the module proxy.
const MULTUS: Module = Module {
    name: "multus",
    dir: "multus",
    pinned: "gopkg.in/k8snetworkplumbingwg/multus-cni.v4",
    packages: &["gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"],
    tags: "",
    cgo: false,
};

/// Paths of the built binaries.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kubectl: PathBuf,
    pub etcd: PathBuf,
    pub kwok: PathBuf,
    /// The Kubernetes release the binaries report, such as `v1.36.3`.
    pub kubernetes_version: String,
    /// Folder of kwok's module source, which ships the stage definitions.
    pub kwok_module_dir: PathBuf,
}

/// Builds whatever is missing from the cache and returns the binaries' paths. Progress of a
/// build goes to stderr, since the first one takes minutes.
pub fn ensure() -> Result<Binaries> {
    let _lock = crate::lock::FileLock::acquire(&paths::cache_dir().join("build.lock"))?;
    let k8s = build(&KUBERNETES)?;
    let etcd = build(&ETCD)?;
    let kwok = build(&KWOK)?;
    let kwok_version = pinned_version(&KWOK)?;
    Ok(Binaries {
        kube_apiserver: k8s.join("kube-apiserver"),
        kube_controller_manager: k8s.join("kube-controller-manager"),
        kube_scheduler: k8s.join("kube-scheduler"),
        kubectl: k8s.join("kubectl"),
        etcd: etcd.join("etcd"),
        kwok: kwok.join("kwok"),
        kubernetes_version: pinned_version(&KUBERNETES)?,
        kwok_module_dir: go_module_dir(&KWOK, &format!("sigs.k8s.io/kwok@{kwok_version}"))?,
    })
}

/// The helm binary, built from its Go module when not cached.
pub fn helm() -> Result<PathBuf> {
    let _lock = crate::lock::FileLock::acquire(&paths::cache_dir().join("build.lock"))?;
    Ok(build(&HELM)?.join("helm"))
}

/// Paths of a real node's binaries.
#[derive(Clone, Debug)]
pub struct NodeBinaries {
    pub kubelet: PathBuf,
    pub kube_proxy: PathBuf,
    pub containerd: PathBuf,
    pub ctr: PathBuf,
    /// The folder of `containerd-shim-runc-v2`, which containerd finds on its PATH.
    pub shim_dir: PathBuf,
    pub runc: PathBuf,
    /// The CNI plugins and Multus, in one folder as CNI's `bin_dirs` wants them.
    pub cni_dir: PathBuf,
}

/// The real node's binaries, built from their Go modules when not cached; the CNI plugins and
/// Multus are linked into one folder.
pub fn node() -> Result<NodeBinaries> {
    let _lock = crate::lock::FileLock::acquire(&paths::cache_dir().join("build.lock"))?;
    let kubernetes = build(&KUBERNETES_NODE)?;
    let containerd = build(&CONTAINERD)?;
    let runc = build(&RUNC)?;
    let plugins = build(&CNI_PLUGINS)?;
    let multus = build(&MULTUS)?;
    let cni_dir = paths::cache_dir().join("bin").join(format!(
        "cni-{}-multus-{}",
        pinned_version(&CNI_PLUGINS)?,
        pinned_version(&MULTUS)?
    ));
    std::fs::create_dir_all(&cni_dir).map_err(|e| Error::io(&cni_dir, e))?;
    for (dir, module) in [(&plugins, &CNI_PLUGINS), (&multus, &MULTUS)] {
        for package in module.packages {
            let name = binary_name(package, module);
            let link = cni_dir.join(&name);
            if std::fs::read_link(&link).is_err() {
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(dir.join(&name), &link).map_err(|e| Error::io(&link, e))?;
            }
        }
    }
    Ok(NodeBinaries {
        kubelet: kubernetes.join("kubelet"),
        kube_proxy: kubernetes.join("kube-proxy"),
        containerd: containerd.join("containerd"),
        ctr: containerd.join("ctr"),
        shim_dir: containerd.clone(),
        runc: runc.join("runc"),
        cni_dir,
    })
}

/// Paths of the pinned Prometheus server and its promtool.
#[derive(Clone, Debug)]
pub struct Prometheus {
    pub prometheus: PathBuf,
    pub promtool: PathBuf,
}

/// Prometheus and promtool, built from their Go module when not cached.
pub fn prometheus() -> Result<Prometheus> {
    let _lock = crate::lock::FileLock::acquire(&paths::cache_dir().join("build.lock"))?;
    let dir = build(&PROMETHEUS)?;
    Ok(Prometheus {
        prometheus: dir.join("prometheus"),
        promtool: dir.join("promtool"),
    })
}

/// The kube-score binary, built from its Go module when not cached.
pub fn kube_score() -> Result<PathBuf> {
    let _lock = crate::lock::FileLock::acquire(&paths::cache_dir().join("build.lock"))?;
    Ok(build(&KUBE_SCORE)?.join("kube-score"))
}

/// kubernetes/sample-controller's binary, built from the benchmark's Go module when not cached.
pub fn sample_controller() -> Result<PathBuf> {
    let _lock = crate::lock::FileLock::acquire(&paths::cache_dir().join("build.lock"))?;
    Ok(build(&SAMPLE_CONTROLLER)?.join("sample-controller"))
}

/// The folder of the Prometheus Operator's CustomResourceDefinitions (ServiceMonitor,
/// PodMonitor, PrometheusRule and the rest), from its pinned Go module.
pub fn prometheus_operator_crds() -> Result<PathBuf> {
    let module = &PROMETHEUS_OPERATOR;
    let version = pinned_version(module)?;
    let dir = go_module_dir(module, &format!("{}@{version}", module.pinned))?;
    Ok(dir.join("example").join("prometheus-operator-crd"))
}

/// The folder of cert-manager's CRDs (Certificate, Issuer and the rest), from its pinned Go
/// module.
pub fn cert_manager_crds() -> Result<PathBuf> {
    let module = &CERT_MANAGER;
    let version = pinned_version(module)?;
    let dir = go_module_dir(module, &format!("{}@{version}", module.pinned))?;
    Ok(dir.join("deploy").join("crds"))
}

/// The version the wrapper's `go.mod` requires for the pinned module.
fn pinned_version(module: &Module) -> Result<String> {
    let path = paths::toolchain_dir().join(module.dir).join("go.mod");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    parse_required_version(&text, module.pinned).ok_or_else(|| Error::Toolchain {
        component: module.dir.into(),
        message: format!("{} does not require {}", path.display(), module.pinned),
    })
}

/// Finds `module vX.Y.Z` in a go.mod, in a `require` line or block.
pub(crate) fn parse_required_version(go_mod: &str, module: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let line = line.trim().trim_start_matches("require").trim();
        let mut words = line.split_whitespace();
        (words.next()? == module).then(|| words.next().map(str::to_owned))?
    })
}

fn binary_name(package: &str, module: &Module) -> String {
    if package == "." {
        module.dir.to_owned()
    } else {
        package.rsplit('/').next().unwrap_or(package).to_owned()
    }
}

/// Builds one module's binaries into `<cache>/bin/<dir>-<version>/` unless they are there.
fn build(module: &Module) -> Result<PathBuf> {
    let version = pinned_version(module)?;
    let dest = paths::cache_dir()
        .join("bin")
        .join(format!("{}-{version}", module.name));
    let names: Vec<String> = module.packages.iter().map(|p| binary_name(p, module)).collect();
    if names.iter().all(|n| dest.join(n).is_file()) {
        return Ok(dest);
    }
    // Test processes run at once, and several may need the same tool: one builds it, the
    // others wait for it and then find it built.
    std::fs::create_dir_all(paths::cache_dir().join("bin")).map_err(|e| Error::io(&dest, e))?;
    let lock_path = dest.with_extension("lock");
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(&lock_path, e))?;
    lock.lock().map_err(|e| Error::io(&lock_path, e))?;
    if names.iter().all(|n| dest.join(n).is_file()) {
        return Ok(dest);
    }
    let staging = dest.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;

    let mut ldflags = String::from("-s -w");
    if module.dir == "kubernetes" {
        ldflags.push_str(&kubernetes_version_ldflags(&version));
    }
    if module.name == "containerd" {
        ldflags.push_str(&format!(
            " -X github.com/containerd/containerd/v2/version.Version={version}"
        ));
    }
    if module.name == "prometheus" {
        ldflags.push_str(&prometheus_version_ldflags(&version));
    }
    let src = paths::toolchain_dir().join(module.dir);
    let mut cmd = go_command(&src);
    if module.cgo {
        if module.tags.contains("seccomp") && !Path::new("/usr/include/seccomp.h").is_file() {
            return Err(Error::Toolchain {
                component: module.name.into(),
                message: "needs libseccomp's headers: install libseccomp-dev (Debian) or libseccomp-devel"
                    .into(),
            });
        }
        cmd.env("CGO_ENABLED", "1");
    }
    cmd.args([
        "build",
        "-v",
        "-trimpath",
        "-tags",
        module.tags,
        "-ldflags",
        &ldflags,
        "-o",
    ]);
    // A trailing slash makes `go build -o` treat the target as a folder even for one package.
    cmd.arg(format!("{}/", staging.display()));
    cmd.args(module.packages);
    eprintln!(
        "building {} {version} from Go modules (the first build takes several minutes)",
        module.name
    );
    run_with_progress(cmd, module.name)?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(|e| Error::io(&dest, e))?;
    }
    std::fs::rename(&staging, &dest).map_err(|e| Error::io(&dest, e))?;
    Ok(dest)
}

/// The `-X` flags that make the binaries report the release they were built from; without
/// them they report v0.0.0 and kubectl warns about version skew.
fn kubernetes_version_ldflags(version: &str) -> String {
    let trimmed = version.trim_start_matches('v');
    let mut parts = trimmed.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    let mut flags = String::new();
    for pkg in ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"] {
        for (var, value) in [
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"),
        ] {
            flags.push_str(&format!(" -X {pkg}.{var}={value}"));
        }
    }
    flags
}

/// Prometheus' module versions hide its release in the minor (v0.316.0 is 3.16.0, v0.54.1 was
/// 2.54.1); the `-X` flag makes `--version` say the release.
fn prometheus_version_ldflags(version: &str) -> String {
    let release = version
        .trim_start_matches("v0.")
        .split_once('.')
        .and_then(|(minor, patch)| {
            let minor: u32 = minor.parse().ok()?;
            Some(if minor >= 100 {
                format!("{}.{}.{patch}", minor / 100, minor % 100)
            } else {
                format!("2.{minor}.{patch}")
            })
        })
        .unwrap_or_else(|| version.to_owned());
    format!(" -X github.com/prometheus/common/version.Version={release}")
}

/// `go` in `dir`, set up as for the control plane's builds: no cgo, the pinned go.sum, and the
/// installed toolchain. Other Go builds of the project (the benchmark's) use it too.
pub fn go_command(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(dir)
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "-mod=readonly -buildvcs=false");
    // Build with the installed Go unless the caller chose a toolchain (CI may ask the module
    // proxy for a newer one when the machine's Go is too old).
    if std::env::var_os("GOTOOLCHAIN").is_none() {
        cmd.env("GOTOOLCHAIN", "local");
    }
    cmd
}

/// Runs `go build -v`, printing how many packages it compiled every few seconds.
fn run_with_progress(mut cmd: Command, component: &str) -> Result<()> {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| Error::Toolchain {
        component: component.into(),
        message: format!("cannot run `go` ({e}); install Go 1.26 or newer"),
    })?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let compiled = Arc::new(AtomicUsize::new(0));
    let tail = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let (compiled, tail) = (compiled.clone(), tail.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(std::result::Result::ok) {
                compiled.fetch_add(1, Ordering::Relaxed);
                let mut tail = tail.lock().expect("tail lock");
                tail.push(line);
                if tail.len() > 40 {
                    tail.remove(0);
                }
            }
        })
    };
    let started = Instant::now();
    let mut last_report = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::io(Path::new("go"), e))? {
            break status;
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            eprintln!(
                "  {component}: {} packages compiled, {}s",
                compiled.load(Ordering::Relaxed),
                started.elapsed().as_secs()
            );
            last_report = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = reader.join();
    if !status.success() {
        let tail = tail.lock().expect("tail lock").join("\n");
        return Err(Error::Toolchain {
            component: component.into(),
            message: format!("go build failed:\n{tail}"),
        });
    }
    eprintln!("  {component}: built in {}s", started.elapsed().as_secs());
    Ok(())
}

/// The folder of a downloaded module, from `go mod download -json`.
fn go_module_dir(module: &Module, path_at_version: &str) -> Result<PathBuf> {
    let src = paths::toolchain_dir().join(module.dir);
    let output = go_command(&src)
        .args(["mod", "download", "-json", path_at_version])
        .output()
        .map_err(|e| Error::io(Path::new("go"), e))?;
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| Error::Toolchain {
        component: module.dir.into(),
        message: format!("unexpected output of go mod download: {e}"),
    })?;
    info.get("Dir")
        .and_then(|d| d.as_str())
        .map(PathBuf::from)
        .ok_or_else(|| Error::Toolchain {
            component: module.dir.into(),
            message: format!(
                "go mod download {path_at_version}: {}",
                String::from_utf8_lossy(&output.stderr)
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions_from_single_line_and_block_requires() {
        let go_mod = "module x\n\nrequire k8s.io/kubernetes v1.36.3\n\nrequire (\n\tsigs.k8s.io/kwok v0.8.0\n\tfoo v1 // indirect\n)\n";
        assert_eq!(
            parse_required_version(go_mod, "k8s.io/kubernetes").as_deref(),
            Some("v1.36.3")
        );
        assert_eq!(
            parse_required_version(go_mod, "sigs.k8s.io/kwok").as_deref(),
            Some("v0.8.0")
        );
        assert_eq!(parse_required_version(go_mod, "k8s.io/api"), None);
    }

    #[test]
    fn the_committed_wrappers_pin_the_documented_releases() {
        let k8s = pinned_version(&KUBERNETES).unwrap();
        assert!(k8s.starts_with("v1.36."), "{k8s}");
        assert!(pinned_version(&ETCD).unwrap().starts_with("v3.6."));
        assert_eq!(pinned_version(&KWOK).unwrap(), "v0.8.0");
        // The release of the control plane, as the benchmark's peer.
        let staging = pinned_version(&KUBERNETES).unwrap().replacen("v1.", "v0.", 1);
        assert_eq!(pinned_version(&SAMPLE_CONTROLLER).unwrap(), staging);
    }

    #[test]
    fn every_staging_module_is_replaced_at_the_matching_release() {
        let path = paths::toolchain_dir().join("kubernetes/go.mod");
        let go_mod = std::fs::read_to_string(path).unwrap();
        let k8s = pinned_version(&KUBERNETES).unwrap();
        let staging = k8s.replacen("v1.", "v0.", 1);
        let replaces: Vec<&str> = go_mod.lines().filter(|l| l.contains(" => ")).collect();
        assert!(replaces.len() >= 31, "only {} replace lines", replaces.len());
        for line in replaces {
            assert!(line.trim_end().ends_with(&staging), "{line} is not at {staging}");
        }
    }

    #[test]
    fn version_flags_cover_both_version_packages() {
        let flags = kubernetes_version_ldflags("v1.36.3");
        assert!(flags.contains("-X k8s.io/component-base/version.gitVersion=v1.36.3"));
        assert!(flags.contains("-X k8s.io/client-go/pkg/version.gitMinor=36"));
    }

    #[test]
    fn prometheus_module_versions_map_to_its_releases() {
        assert!(prometheus_version_ldflags("v0.316.0").ends_with("version.Version=3.16.0"));
        assert!(prometheus_version_ldflags("v0.54.1").ends_with("version.Version=2.54.1"));
        assert!(pinned_version(&PROMETHEUS).unwrap().starts_with("v0.3"));
    }
}
