//! # reson-registry
//!
//! Plugins as OCI artifacts, in the layout the component tools use (wkg,
//! `oci-wasm`): a config of type [`WASM_CONFIG_MEDIA_TYPE`] and one layer of
//! type [`WASM_LAYER_MEDIA_TYPE`] holding the component. What makes it a
//! Reson plugin travels in the image manifest's annotations, so that the
//! component tools can still pull the component:
//! - [`MANIFEST_ANNOTATION`]: the plugin's TOML manifest, verbatim;
//! - [`SIGNATURE_ANNOTATION`]: its detached signature (wasmsign2), base64.
//!
//! The manifest's digest covers both, so a reference by digest pins the
//! component, its requests and its signature together.
//!
//! It depends on no other Reson crate: it moves bytes and checks digests.
//! It must never judge what a plugin asks for or load it: the caller
//! writes the files, and the lock file and the signature check decide, as
//! for a plugin copied in by hand.

mod reference;

pub use reference::OciRef;

use base64::Engine as _;
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, client::ClientConfig, client::ClientProtocol};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The config media type of a WebAssembly artifact (wkg's layout).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the layer that holds the component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The manifest annotation holding the plugin's TOML manifest.
pub const MANIFEST_ANNOTATION: &str = "dev.reson.plugin.manifest";
/// The manifest annotation holding the plugin's detached signature, base64.
pub const SIGNATURE_ANNOTATION: &str = "dev.reson.plugin.signature";
/// The largest component [`Settings::from_env`] lets a pull take.
pub const DEFAULT_MAX_LAYER_BYTES: u64 = 256 << 20;
/// The environment variables holding basic-auth credentials for registries.
pub const USER_ENV: &str = "RESON_REGISTRY_USER";
/// See [`USER_ENV`].
pub const PASSWORD_ENV: &str = "RESON_REGISTRY_PASSWORD";

/// A plugin as it travels: the component, its manifest and its detached
/// signature, if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    /// The WebAssembly component.
    pub wasm: Vec<u8>,
    /// The plugin's manifest (`NAME.toml`), verbatim.
    pub manifest: String,
    /// The detached signature (`NAME.wasm.sig`).
    pub signature: Option<Vec<u8>>,
}

/// A plugin pulled from a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// What was pulled.
    pub plugin: Plugin,
    /// The digest of the image manifest (`sha256:...`): the reference to
    /// pin, and what the lock file records.
    pub digest: String,
}

/// How to talk to a registry.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Speak plain HTTP to a registry that is not on a loopback address
    /// (loopback registries always get plain HTTP).
    pub insecure: bool,
    /// The largest component a pull accepts.
    pub max_layer_bytes: u64,
    /// Basic-auth user and password; anonymous without.
    pub credentials: Option<(String, String)>,
}

impl Settings {
    /// The defaults, with credentials from [`USER_ENV`] and
    /// [`PASSWORD_ENV`] when both are set.
    pub fn from_env(insecure: bool) -> Self {
        let credentials = match (std::env::var(USER_ENV), std::env::var(PASSWORD_ENV)) {
            (Ok(user), Ok(password)) => Some((user, password)),
            _ => None,
        };
        Self { insecure, max_layer_bytes: DEFAULT_MAX_LAYER_BYTES, credentials }
    }

    fn auth(&self) -> RegistryAuth {
        match &self.credentials {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    fn client(&self, reference: &OciRef) -> Client {
        let registry = reference.registry().to_owned();
        let protocol = if self.insecure {
            ClientProtocol::Http
        } else if reference.is_loopback() {
            ClientProtocol::HttpsExcept(vec![registry])
        } else {
            ClientProtocol::Https
        };
        // reqwest is built without a TLS provider of its own: the ring
        // provider the host uses serves it (a second install is refused,
        // harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client::new(ClientConfig {
            protocol,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            // An index (several platforms) is not a plugin.
            platform_resolver: None,
            ..ClientConfig::default()
        })
    }
}

/// Why a pull or a push failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The reference is not `oci://HOST[:PORT]/REPOSITORY(:TAG|@DIGEST)`.
    #[error(
        "`{reference}` is not a plugin reference: {reason} (write \
         oci://HOST[:PORT]/REPOSITORY:TAG or oci://HOST[:PORT]/REPOSITORY@sha256:DIGEST)"
    )]
    BadReference {
        /// What was given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No connection could be made.
    #[error("the registry {registry} cannot be reached: {detail}")]
    Unreachable {
        /// `HOST[:PORT]`.
        registry: String,
        /// The transport's error.
        detail: String,
    },
    /// The tag, digest or repository does not exist.
    #[error("{reference} is not in the registry: {detail}")]
    NotFound {
        /// The reference asked for.
        reference: String,
        /// The registry's words.
        detail: String,
    },
    /// The registry wants other credentials.
    #[error("the registry {registry} refused access: {detail} (set {USER_ENV} and {PASSWORD_ENV})")]
    Unauthorized {
        /// `HOST[:PORT]`.
        registry: String,
        /// The registry's words.
        detail: String,
    },
    /// Something in the artifact has a media type a plugin cannot have.
    #[error("{reference}: {what} has media type `{found}`, expected `{expected}`")]
    WrongMediaType {
        /// The reference pulled.
        reference: String,
        /// Which part.
        what: String,
        /// Its media type.
        found: String,
        /// The one a plugin has.
        expected: &'static str,
    },
    /// A WebAssembly artifact without a Reson manifest: its grants cannot be
    /// known, so it is not installed.
    #[error(
        "{reference} holds a WebAssembly component but no Reson plugin manifest (the \
         `{MANIFEST_ANNOTATION}` annotation): publish it with `reson plugins publish`, which \
         sends the manifest that says what the plugin requests"
    )]
    NoPluginManifest {
        /// The reference pulled.
        reference: String,
    },
    /// Content whose digest is not the one it was asked for by.
    #[error("{reference}: {what} has digest {actual}, not {expected}")]
    DigestMismatch {
        /// The reference pulled.
        reference: String,
        /// Which part.
        what: String,
        /// The digest it was asked for by.
        expected: String,
        /// The digest of what came.
        actual: String,
    },
    /// A component larger than [`Settings::max_layer_bytes`].
    #[error("{reference}: the component is {size} bytes, over the cap of {cap}")]
    TooLarge {
        /// The reference pulled.
        reference: String,
        /// Its declared size.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// An artifact that is malformed in another way.
    #[error("{reference}: {detail}")]
    BadArtifact {
        /// The reference pulled.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// Any other failure the registry reported.
    #[error("the registry {registry} failed: {detail}")]
    Registry {
        /// `HOST[:PORT]`.
        registry: String,
        /// The registry's words.
        detail: String,
    },
}

/// Sorts an `oci-client` error met while moving `what` into ours.
fn classify(reference: &OciRef, what: &str, error: OciDistributionError) -> RegistryError {
    let registry = reference.registry().to_owned();
    let detail = error.to_string();
    let not_found = |detail| RegistryError::NotFound { reference: reference.to_string(), detail };
    match error {
        OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
            // The connect error's cause (refused, no route) is in its source.
            let mut detail = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                detail = format!("{detail}: {cause}");
                source = cause.source();
            }
            RegistryError::Unreachable { registry, detail }
        }
        OciDistributionError::ImageManifestNotFoundError(_) => not_found(detail),
        OciDistributionError::RegistryError { ref envelope, .. }
            if envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) =>
        {
            not_found(detail)
        }
        OciDistributionError::ServerError { code: 404, .. } => not_found(detail),
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::ServerError { code: 401 | 403, .. } => {
            RegistryError::Unauthorized { registry, detail }
        }
        OciDistributionError::RegistryError { ref envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            RegistryError::Unauthorized { registry, detail }
        }
        OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError {
            expected,
            actual,
        }) => RegistryError::DigestMismatch {
            reference: reference.to_string(),
            what: what.into(),
            expected,
            actual,
        },
        _ => RegistryError::Registry { registry, detail },
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Pushes `plugin` to `reference` (a tag); returns the manifest's digest.
pub async fn push(
    reference: &OciRef,
    plugin: &Plugin,
    settings: &Settings,
) -> Result<String, RegistryError> {
    if reference.digest().is_some() {
        return Err(RegistryError::BadReference {
            reference: reference.to_string(),
            reason: "a plugin is published to a tag, and its digest is what comes back".into(),
        });
    }
    let client = settings.client(reference);
    let image = reference.oci();
    client.store_auth_if_needed(reference.registry(), &settings.auth()).await;
    let oops = |e| classify(reference, "the plugin", e);

    let wasm_digest = sha256(&plugin.wasm);
    let config = serde_json::json!({
        "created": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [wasm_digest],
    });
    let config = serde_json::to_vec(&config).expect("a JSON value serializes");
    let config_digest = sha256(&config);
    client.push_blob(image, plugin.wasm.clone(), &wasm_digest).await.map_err(oops)?;
    client.push_blob(image, config.clone(), &config_digest).await.map_err(oops)?;

    let mut annotations = BTreeMap::from([(MANIFEST_ANNOTATION.into(), plugin.manifest.clone())]);
    if let Some(signature) = &plugin.signature {
        annotations.insert(
            SIGNATURE_ANNOTATION.into(),
            base64::engine::general_purpose::STANDARD.encode(signature),
        );
    }
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
        config: descriptor(WASM_CONFIG_MEDIA_TYPE, config_digest, config.len()),
        layers: vec![descriptor(WASM_LAYER_MEDIA_TYPE, wasm_digest, plugin.wasm.len())],
        subject: None,
        artifact_type: None,
        annotations: Some(annotations),
    };
    let body = serde_json::to_vec(&manifest).expect("a manifest serializes");
    let digest = sha256(&body);
    client
        .push_manifest_raw(image, body, OCI_IMAGE_MEDIA_TYPE.parse().expect("a header value"))
        .await
        .map_err(oops)?;
    Ok(digest)
}

fn descriptor(media_type: &str, digest: String, size: usize) -> OciDescriptor {
    OciDescriptor {
        media_type: media_type.into(),
        digest,
        size: i64::try_from(size).unwrap_or(i64::MAX),
        ..OciDescriptor::default()
    }
}

/// Pulls the plugin at `reference`, checking the manifest against the
/// reference's digest (when it has one) and the component against the
/// manifest's.
pub async fn pull(reference: &OciRef, settings: &Settings) -> Result<Pulled, RegistryError> {
    let client = settings.client(reference);
    let image = reference.oci();
    let named = reference.to_string();
    let (body, _) = client
        .pull_manifest_raw(image, &settings.auth(), &[OCI_IMAGE_MEDIA_TYPE])
        .await
        .map_err(|e| classify(reference, "the manifest", e))?;
    let digest = sha256(&body);
    if let Some(expected) = reference.digest()
        && expected != digest
    {
        return Err(RegistryError::DigestMismatch {
            reference: named,
            what: "the manifest".into(),
            expected: expected.to_owned(),
            actual: digest,
        });
    }
    let manifest: OciImageManifest =
        serde_json::from_slice(&body).map_err(|e| RegistryError::BadArtifact {
            reference: named.clone(),
            detail: format!("its manifest is not an OCI image manifest: {e}"),
        })?;
    let wrong = |what: &str, found: &str, expected| RegistryError::WrongMediaType {
        reference: named.clone(),
        what: what.into(),
        found: found.into(),
        expected,
    };
    if let Some(found) = manifest.media_type.as_deref().filter(|m| *m != OCI_IMAGE_MEDIA_TYPE) {
        return Err(wrong("the manifest", found, OCI_IMAGE_MEDIA_TYPE));
    }
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(wrong("the config", &manifest.config.media_type, WASM_CONFIG_MEDIA_TYPE));
    }
    let layer = match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => layer,
        [layer] => return Err(wrong("its layer", &layer.media_type, WASM_LAYER_MEDIA_TYPE)),
        layers => {
            return Err(RegistryError::BadArtifact {
                reference: named,
                detail: format!("a plugin has one layer, the component; this has {}", layers.len()),
            });
        }
    };
    let annotations = manifest.annotations.unwrap_or_default();
    let Some(plugin_manifest) = annotations.get(MANIFEST_ANNOTATION) else {
        return Err(RegistryError::NoPluginManifest { reference: named });
    };
    let signature = annotations
        .get(SIGNATURE_ANNOTATION)
        .map(|s| base64::engine::general_purpose::STANDARD.decode(s))
        .transpose()
        .map_err(|e| RegistryError::BadArtifact {
            reference: named.clone(),
            detail: format!("the `{SIGNATURE_ANNOTATION}` annotation is not base64: {e}"),
        })?;
    let size = u64::try_from(layer.size).unwrap_or(0);
    if size > settings.max_layer_bytes {
        return Err(RegistryError::TooLarge {
            reference: named,
            size,
            cap: settings.max_layer_bytes,
        });
    }
    let mut wasm = Capped { bytes: Vec::new(), cap: size };
    match client.pull_blob(image, layer, &mut wasm).await {
        Ok(()) => {}
        Err(OciDistributionError::IoError(e)) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            return Err(RegistryError::BadArtifact {
                reference: named,
                detail: format!("the registry sent more than the {size} bytes its manifest says"),
            });
        }
        Err(e) => return Err(classify(reference, "the component", e)),
    }
    Ok(Pulled {
        plugin: Plugin { wasm: wasm.bytes, manifest: plugin_manifest.clone(), signature },
        digest,
    })
}

/// A buffer that refuses to grow past `cap` bytes: what a layer's
/// manifest declares, so a registry cannot fill the memory.
struct Capped {
    bytes: Vec<u8>,
    cap: u64,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if (self.bytes.len() + buf.len()) as u64 > self.cap {
            return Poll::Ready(Err(std::io::ErrorKind::FileTooLarge.into()));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
