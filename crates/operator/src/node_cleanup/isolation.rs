//! Whether the node's Multus keeps namespaces apart (`namespaceIsolation`), read from the CNI
//! configuration folder the way the container runtime picks its network: the first file, in
//! name order, ending in `.conf`, `.conflist` or `.json`. Without isolation a Pod may name
//! another namespace's Network (`other/network`) and join its bridge and address pool; the
//! operator cannot see a node's files, so the node agent checks at its start.

use std::path::{Path, PathBuf};

/// What the node's CNI configuration says about Multus' namespace isolation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Multus is the node's network, with `namespaceIsolation: true`.
    On { file: PathBuf },
    /// Multus is the node's network, without `namespaceIsolation: true`.
    Off { file: PathBuf },
    /// Multus' thick plugin: its shim's file here; the setting is in the daemon's own
    /// configuration, which this agent does not read.
    Thick { file: PathBuf },
    /// The node's network is not Multus (the file's first plugin is `kind`): the operator's
    /// Networks cannot be attached here.
    NotMultus { file: PathBuf, kind: String },
    /// No configuration, or one that cannot be read.
    Unreadable { reason: String },
}

/// The configuration file the runtime uses in `dir`.
fn first_config(dir: &Path) -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "conf" | "conflist" | "json"))
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .next()
        .ok_or_else(|| format!("no CNI configuration in {}", dir.display()))
}

/// Reads the node's CNI configuration in `dir`.
pub fn check(dir: &Path) -> Isolation {
    let file = match first_config(dir) {
        Ok(file) => file,
        Err(reason) => return Isolation::Unreadable { reason },
    };
    let config = match std::fs::read_to_string(&file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()))
    {
        Ok(config) => config,
        Err(e) => {
            return Isolation::Unreadable {
                reason: format!("{}: {e}", file.display()),
            };
        }
    };
    // A `.conflist` names its plugins in a list; the first is the network's.
    let plugin = config.get("plugins").and_then(|p| p.get(0)).unwrap_or(&config);
    let kind = plugin.get("type").and_then(|t| t.as_str()).unwrap_or_default();
    match kind {
        "multus" if plugin.get("namespaceIsolation").and_then(|v| v.as_bool()) == Some(true) => {
            Isolation::On { file }
        }
        "multus" => Isolation::Off { file },
        "multus-shim" => Isolation::Thick { file },
        _ => Isolation::NotMultus {
            file,
            kind: kind.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sample-operator-isolation-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn multus_with_isolation_is_on_and_without_it_off() {
        let on = folder(&[(
            "00-multus.conf",
            r#"{"type":"multus","namespaceIsolation":true,"clusterNetwork":"x"}"#,
        )]);
        assert_eq!(
            check(&on),
            Isolation::On {
                file: on.join("00-multus.conf")
            }
        );
        for text in [
            r#"{"type":"multus"}"#,
            r#"{"type":"multus","namespaceIsolation":false}"#,
            r#"{"type":"multus","namespaceIsolation":"true"}"#,
        ] {
            let off = folder(&[("00-multus.conf", text)]);
            assert_eq!(
                check(&off),
                Isolation::Off {
                    file: off.join("00-multus.conf")
                },
                "{text}"
            );
        }
        let _ = std::fs::remove_dir_all(&on);
    }

    #[test]
    fn the_runtimes_first_file_counts_and_a_conflist_by_its_first_plugin() {
        // The runtime takes 00-… before 10-…, whatever the later one says; other names are not
        // configurations.
        let dir = folder(&[
            (
                "00-multus.conflist",
                r#"{"plugins":[{"type":"multus"},{"type":"portmap"}]}"#,
            ),
            ("10-multus.conf", r#"{"type":"multus","namespaceIsolation":true}"#),
            ("000-notes.txt", "not a configuration"),
        ]);
        assert_eq!(
            check(&dir),
            Isolation::Off {
                file: dir.join("00-multus.conflist")
            }
        );
        let dir = folder(&[("10-bridge.conf", r#"{"type":"bridge"}"#)]);
        assert_eq!(
            check(&dir),
            Isolation::NotMultus {
                file: dir.join("10-bridge.conf"),
                kind: "bridge".into()
            }
        );
        let dir = folder(&[("00-multus.conf", r#"{"type":"multus-shim"}"#)]);
        assert!(matches!(check(&dir), Isolation::Thick { .. }));
        let dir = folder(&[("00-multus.conf", "{")]);
        assert!(matches!(check(&dir), Isolation::Unreadable { .. }));
        let empty = folder(&[]);
        assert!(matches!(check(&empty), Isolation::Unreadable { .. }));
        assert!(matches!(
            check(&empty.join("missing")),
            Isolation::Unreadable { .. }
        ));
        let _ = std::fs::remove_dir_all(&empty);
    }
}
