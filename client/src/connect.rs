//! The connection to a coordinator: the endpoint, TLS (rustls, with an optional client certificate) and the token
//! sent as `authorization: Bearer <token>` on every call. Workers and every `sweep` client command build their
//! channels here, so they agree on URLs, files and error messages.
//!
//! A token given as a file is re-read when the file changes (checked at most once per second), so rotating a
//! worker's token means writing the new one into its file: no restart, and no chunk is lost.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sweep_proto::Transport;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};
use tracing::{info, warn};

/// A transport (a network channel, or a coordinator in this process) that carries the client's token on every
/// call.
pub type SecureChannel = InterceptedService<Transport, TokenInterceptor>;

/// How a client proves who it is and checks whom it talks to. `Default`: plain HTTP, no token.
#[derive(Clone, Debug, Default)]
pub struct ClientSecurity {
    /// A file whose first token line is the token (`#` comment lines and blank lines are skipped).
    pub token_file: Option<PathBuf>,
    /// The token itself (`SWEEP_TOKEN`), used when there is no file.
    pub token: Option<String>,
    /// The CA certificate (PEM) that signed the coordinator's certificate; needed for `https://`.
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate and key (PEM), for a coordinator that requires client certificates.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

/// Settings that cannot make a connection: found before anything is sent.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid coordinator URL `{url}`: {why}")]
    BadUrl { url: String, why: String },
    #[error("invalid coordinator URL list `{list}`: {why}")]
    BadUrlList { list: String, why: String },
    #[error("cannot read the token file {}: {source}", file.display())]
    TokenFile {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("the token file {} holds no token", file.display())]
    NoToken { file: PathBuf },
    #[error("the token from {from} has a character outside printable ASCII (spaces included)")]
    BadToken { from: String },
    #[error("cannot read the TLS file {}: {source}", file.display())]
    TlsFile {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("the TLS file {} is not a PEM {what}: {why}", file.display())]
    BadTlsFile {
        file: PathBuf,
        what: &'static str,
        why: String,
    },
    #[error(
        "`{url}` is https: give --tls-ca FILE, the CA certificate that signed the coordinator's"
    )]
    HttpsWithoutCa { url: String },
    #[error("TLS options were given but `{url}` is not an https:// URL")]
    TlsWithoutHttps { url: String },
    #[error("--tls-cert and --tls-key go together")]
    HalfIdentity,
    #[error("bad TLS settings: {0}")]
    Tls(String),
}

/// The endpoint for `url` with TLS set up as `sec` says, and the connect timeout and keepalives of every
/// connection (`sweep_proto::deadline::keepalive`). Callers give each call its deadline.
pub fn endpoint(url: &str, sec: &ClientSecurity) -> Result<Endpoint, ConnectError> {
    let endpoint = Endpoint::from_shared(url.to_string()).map_err(|e| ConnectError::BadUrl {
        url: url.to_string(),
        why: e.to_string(),
    })?;
    let endpoint = sweep_proto::deadline::keepalive(endpoint);
    let https = url.starts_with("https://");
    let any_tls = sec.tls_ca.is_some() || sec.tls_cert.is_some() || sec.tls_key.is_some();
    if !https {
        if any_tls {
            return Err(ConnectError::TlsWithoutHttps {
                url: url.to_string(),
            });
        }
        return Ok(endpoint);
    }
    let Some(ca) = &sec.tls_ca else {
        return Err(ConnectError::HttpsWithoutCa {
            url: url.to_string(),
        });
    };
    let identity = match (&sec.tls_cert, &sec.tls_key) {
        (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
        (None, None) => None,
        _ => return Err(ConnectError::HalfIdentity),
    };
    endpoint
        .tls_config(tls_config(ca, identity)?)
        .map_err(|e| ConnectError::Tls(source_text(&e)))
}

/// The TLS settings of a client from PEM files: `ca`, the CA certificate that signed the servers'
/// certificates, and `identity`, this client's certificate and key, for servers that require client
/// certificates. Every file is read and parsed now, so a missing or garbled one is named before anything is
/// sent rather than failing each handshake later.
pub fn tls_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientTlsConfig, ConnectError> {
    let ca_pem = read_pem(ca, "CERTIFICATE", "CA certificate")?;
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    try_tls(&tls).map_err(|why| ConnectError::BadTlsFile {
        file: ca.to_path_buf(),
        what: "CA certificate",
        why,
    })?;
    if let Some((cert, key)) = identity {
        let cert_pem = read_pem(cert, "CERTIFICATE", "certificate")?;
        let key_pem = read_pem(key, "PRIVATE KEY", "private key")?;
        tls = tls.identity(Identity::from_pem(cert_pem, key_pem));
        try_tls(&tls).map_err(|why| ConnectError::BadTlsFile {
            file: cert.to_path_buf(),
            what: "certificate matching its key",
            why: format!("{why} (key {})", key.display()),
        })?;
    }
    Ok(tls)
}

/// Whether `tls` makes a connector: tonic parses the PEM files only then, and a file without a single PEM
/// block would pass as a CA that trusts nobody.
fn try_tls(tls: &ClientTlsConfig) -> Result<(), String> {
    Endpoint::from_static("https://localhost")
        .tls_config(tls.clone())
        .map(|_| ())
        .map_err(|e| source_text(&e))
}

/// The bytes of `file`, which must hold a PEM block whose label ends in `label` (`-----BEGIN CERTIFICATE-----`,
/// `-----BEGIN EC PRIVATE KEY-----`).
fn read_pem(file: &Path, label: &str, what: &'static str) -> Result<Vec<u8>, ConnectError> {
    let bytes = read_tls(file)?;
    let marker = format!("{label}-----");
    let has_block = String::from_utf8_lossy(&bytes)
        .lines()
        .any(|l| l.trim().starts_with("-----BEGIN ") && l.trim().ends_with(&marker));
    if !has_block {
        return Err(ConnectError::BadTlsFile {
            file: file.to_path_buf(),
            what,
            why: format!("it holds no `-----BEGIN ...{marker}` block"),
        });
    }
    Ok(bytes)
}

fn read_tls(file: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(file).map_err(|source| ConnectError::TlsFile {
        file: file.to_path_buf(),
        source,
    })
}

fn source_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text = format!("{text}: {s}");
        cur = s.source();
    }
    text
}

/// The interceptor that adds the token of `sec` to every call (none if `sec` has no token). A token file is
/// read now, so a missing or empty file is reported before anything is sent.
pub fn token_interceptor(sec: &ClientSecurity) -> Result<TokenInterceptor, ConnectError> {
    let (value, file) = match (&sec.token_file, &sec.token) {
        (Some(file), _) => (read_token_file(file)?, Some(file.clone())),
        (None, Some(token)) => (bearer(token.trim(), "SWEEP_TOKEN")?, None),
        (None, None) => return Ok(TokenInterceptor { state: None }),
    };
    Ok(TokenInterceptor {
        state: Some(Arc::new(TokenState {
            file,
            current: Mutex::new((value, Instant::now())),
        })),
    })
}

/// `channel` with the token of `interceptor` on every call.
pub fn secure(channel: Channel, interceptor: TokenInterceptor) -> SecureChannel {
    InterceptedService::new(sweep_proto::transport(channel), interceptor)
}

/// A coordinator's services in this process (`sweep_coordinator::in_process`), which ask for no token.
pub fn in_process(transport: Transport) -> SecureChannel {
    InterceptedService::new(transport, TokenInterceptor { state: None })
}

fn bearer(token: &str, from: &str) -> Result<MetadataValue<Ascii>, ConnectError> {
    let bad = || ConnectError::BadToken {
        from: from.to_string(),
    };
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    let mut value: MetadataValue<Ascii> = format!("Bearer {token}").parse().map_err(|_| bad())?;
    // Keeps the value out of HTTP/2 header tables and debug output of the transport.
    value.set_sensitive(true);
    Ok(value)
}

/// The `authorization` value of the first token in `file` (its first line that is neither blank nor a `#`
/// comment), as every client sends it; also what members of a replicated coordinator call each other with.
pub fn read_token_file(file: &Path) -> Result<MetadataValue<Ascii>, ConnectError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConnectError::TokenFile {
        file: file.to_path_buf(),
        source,
    })?;
    let token = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or_else(|| ConnectError::NoToken {
            file: file.to_path_buf(),
        })?;
    bearer(token, &file.display().to_string())
}

/// How often a token file is checked for a new token.
const TOKEN_RECHECK: Duration = Duration::from_secs(1);

struct TokenState {
    file: Option<PathBuf>,
    /// The header value in use and when the file was last read.
    current: Mutex<(MetadataValue<Ascii>, Instant)>,
}

impl TokenState {
    fn value(&self) -> MetadataValue<Ascii> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = &self.file {
            if cur.1.elapsed() >= TOKEN_RECHECK {
                cur.1 = Instant::now();
                // A small file read at most once a second; a file caught half-written keeps the old token.
                match read_token_file(file) {
                    Ok(v) if v != cur.0 => {
                        info!(file = %file.display(), "token file changed; using the new token");
                        cur.0 = v;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(error = %e, "cannot re-read the token file; keeping the current token")
                    }
                }
            }
        }
        cur.0.clone()
    }
}

/// Adds `authorization: Bearer <token>` to every call; see [`token_interceptor`].
#[derive(Clone)]
pub struct TokenInterceptor {
    state: Option<Arc<TokenState>>,
}

impl Interceptor for TokenInterceptor {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(state) = &self.state {
            req.metadata_mut().insert("authorization", state.value());
        }
        Ok(req)
    }
}

/// Whether a status means the coordinator refused our credentials (retrying will not help).
pub fn is_refusal(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(i: &mut TokenInterceptor) -> Option<String> {
        let req = i.call(Request::new(())).unwrap();
        req.metadata()
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn token_file_first_token_line_is_sent_and_follows_changes() {
        let dir = std::env::temp_dir().join(format!("sweep-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(
            &file,
            "# my worker token\n\n  first-token-abcdefgh  \nsecond\n",
        )
        .unwrap();
        let sec = ClientSecurity {
            token_file: Some(file.clone()),
            token: Some("ignored-when-a-file-is-given".into()),
            ..Default::default()
        };
        let mut i = token_interceptor(&sec).unwrap();
        assert_eq!(
            header(&mut i).as_deref(),
            Some("Bearer first-token-abcdefgh")
        );
        std::fs::write(&file, "rotated-token-abcdefgh\n").unwrap();
        std::thread::sleep(TOKEN_RECHECK + Duration::from_millis(50));
        assert_eq!(
            header(&mut i).as_deref(),
            Some("Bearer rotated-token-abcdefgh")
        );
        // Emptied by mistake: keep sending the last good token.
        std::fs::write(&file, "").unwrap();
        std::thread::sleep(TOKEN_RECHECK + Duration::from_millis(50));
        assert_eq!(
            header(&mut i).as_deref(),
            Some("Bearer rotated-token-abcdefgh")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_tokens_and_files_are_reported_without_the_token() {
        let sec = ClientSecurity {
            token: Some("has space-in-it".into()),
            ..Default::default()
        };
        let e = token_interceptor(&sec).err().unwrap();
        assert!(!e.to_string().contains("space-in-it"), "{e}");
        let sec = ClientSecurity {
            token_file: Some("/nonexistent/token".into()),
            ..Default::default()
        };
        let e = token_interceptor(&sec).err().unwrap();
        assert!(e.to_string().contains("/nonexistent/token"), "{e}");
        let mut none = token_interceptor(&ClientSecurity::default()).unwrap();
        assert_eq!(header(&mut none), None);
    }

    #[test]
    fn a_missing_or_garbled_tls_file_is_named_before_any_connection() {
        let dir = std::env::temp_dir().join(format!("sweep-tls-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbled = dir.join("garbled.pem");
        std::fs::write(&garbled, "not a certificate\n").unwrap();
        // A PEM block that never ends: tonic's parser refuses it, and the file is named.
        let truncated = dir.join("truncated.pem");
        std::fs::write(&truncated, "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
        let e = tls_config(Path::new("/nonexistent/ca.pem"), None).unwrap_err();
        assert!(matches!(e, ConnectError::TlsFile { .. }), "{e}");
        for file in [&garbled, &truncated] {
            let e = tls_config(file, None).unwrap_err();
            assert!(matches!(e, ConnectError::BadTlsFile { .. }), "{e}");
            assert!(e.to_string().contains(&file.display().to_string()), "{e}");
        }
        // Every client's endpoint checks its CA so: a garbled one is not a CA that trusts nobody.
        let sec = ClientSecurity {
            tls_ca: Some(garbled.clone()),
            ..Default::default()
        };
        assert!(matches!(
            endpoint("https://127.0.0.1:1", &sec),
            Err(ConnectError::BadTlsFile { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tls_options_and_url_scheme_must_agree() {
        let ca = ClientSecurity {
            tls_ca: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        assert!(matches!(
            endpoint("http://127.0.0.1:1", &ca),
            Err(ConnectError::TlsWithoutHttps { .. })
        ));
        assert!(matches!(
            endpoint("https://127.0.0.1:1", &ClientSecurity::default()),
            Err(ConnectError::HttpsWithoutCa { .. })
        ));
        assert!(matches!(
            endpoint("https://127.0.0.1:1", &ca),
            Err(ConnectError::TlsFile { .. })
        ));
        assert!(endpoint("http://127.0.0.1:1", &ClientSecurity::default()).is_ok());
        assert!(matches!(
            endpoint("not a url", &ClientSecurity::default()),
            Err(ConnectError::BadUrl { .. })
        ));
    }
}
