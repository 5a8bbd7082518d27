//! A real OCI registry on 127.0.0.1: Debian's `docker-registry` (the CNCF
//! distribution server), installed when missing, serving a throwaway
//! storage directory until dropped.

use super::apt;
use sha2::Digest as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const PROGRAM: &str = "/usr/bin/docker-registry";

/// A registry process and the directory it stores into.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    storage: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry open to anyone on a free port; returns once it
    /// answers.
    pub fn start() -> Self {
        Self::serve(None)
    }

    /// Starts a registry that lets only `user` with `password` in (HTTP
    /// basic auth over an htpasswd file).
    pub fn start_with_login(user: &str, password: &str) -> Self {
        Self::serve(Some((user, password)))
    }

    fn serve(login: Option<(&str, &str)>) -> Self {
        apt::ensure(|| Path::new(PROGRAM).exists(), &["docker-registry"]);
        let storage = tempfile::tempdir().expect("temp dir");
        let auth = match login {
            None => String::new(),
            Some((user, password)) => {
                let file = storage.path().join("htpasswd");
                std::fs::write(&file, htpasswd(user, password)).unwrap();
                format!("auth:\n  htpasswd:\n    realm: reson-test\n    path: {}\n", file.display())
            }
        };
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    \
                 rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:0\n{auth}",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let mut child = Command::new(PROGRAM)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting docker-registry");
        // Port 0, and the registry says where it listens once it does: a
        // port picked here and bound by it later could be another test's by
        // then. Its log is read to the end, so that it never blocks on it.
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let mut registry = Self { child, addr: String::new(), storage };
        let (said, heard) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some((_, rest)) = line.split_once("msg=\"listening on ") {
                    let _ = said.send(rest.split('"').next().unwrap_or_default().to_owned());
                }
            }
        });
        registry.addr =
            heard.recv_timeout(Duration::from_secs(30)).expect("docker-registry did not start");
        registry
    }

    /// `oci://127.0.0.1:PORT/{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.addr)
    }

    /// The file the registry serves the blob `sha256:HEX` from.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Pushes an image manifest over the plain distribution API, as another
    /// tool would: a config of `config_type`, `layers` (media type, bytes)
    /// and `annotations`. Returns the manifest's digest.
    pub async fn push_raw(
        &self,
        repo_tag: &str,
        config_type: &str,
        layers: &[(&str, &[u8])],
        annotations: serde_json::Value,
    ) -> String {
        let (repo, tag) = repo_tag.split_once(':').expect("REPO:TAG");
        let http = reqwest::Client::new();
        let base = format!("http://{}/v2/{repo}", self.addr);
        let push_blob = async |bytes: &[u8]| {
            let digest = sha256(bytes);
            let started = http.post(format!("{base}/blobs/uploads/")).send().await.unwrap();
            assert_eq!(started.status(), 202, "starting an upload");
            let location = started.headers()["location"].to_str().unwrap().to_owned();
            let location = if location.starts_with('/') {
                format!("http://{}{location}", self.addr)
            } else {
                location
            };
            let sep = if location.contains('?') { '&' } else { '?' };
            let done = http
                .put(format!("{location}{sep}digest={digest}"))
                .header("content-type", "application/octet-stream")
                .body(bytes.to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(done.status(), 201, "finishing an upload");
            serde_json::json!({ "mediaType": "", "digest": digest, "size": bytes.len() })
        };
        let mut config = push_blob(b"{}").await;
        config["mediaType"] = config_type.into();
        let mut descriptors = Vec::new();
        for (media_type, bytes) in layers {
            let mut layer = push_blob(bytes).await;
            layer["mediaType"] = (*media_type).into();
            descriptors.push(layer);
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config,
            "layers": descriptors,
            "annotations": annotations,
        });
        let body = serde_json::to_vec(&manifest).unwrap();
        let put = http
            .put(format!("{base}/manifests/{tag}"))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201, "pushing the manifest: {}", put.text().await.unwrap());
        sha256(&body)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An htpasswd line for `user` (bcrypt, the only hash the registry takes),
/// made by Debian's `htpasswd`.
fn htpasswd(user: &str, password: &str) -> Vec<u8> {
    const HTPASSWD: &str = "/usr/bin/htpasswd";
    apt::ensure(|| Path::new(HTPASSWD).exists(), &["apache2-utils"]);
    let out = Command::new(HTPASSWD).args(["-Bbn", user, password]).output().unwrap();
    assert!(out.status.success(), "htpasswd: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// `sha256:HEX` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// A loopback port that refuses connections for as long as the socket is
/// held: bound, so nothing else can take it meanwhile, but never listening.
pub fn refusing_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}
