//! TLS 1.3 for the origin: a test certificate authority made per run, and the server's rustls
//! configuration (HTTP/2 and HTTP/1.1 offered by ALPN, session resumption and 0-RTT on or off).
//!
//! Nothing here touches a system trust store. A client trusts the run's certificates either
//! through [`TestPki::ca_pem`] (a client of its own, e.g. a test's rustls client) or, for
//! Chromium, through [`TestPki::spki_sha256`]: the base64 SHA-256 of the leaf's public key, what
//! `--ignore-certificate-errors-spki-list` takes for that browser process only.
//!
//! The crypto provider is rustls' `ring` (already built in this workspace for the tunnel's
//! Noise; aws-lc-rs needs cmake and a C toolchain's long build).

use crate::Error;
use base64::Engine as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::Digest as _;
use std::sync::Arc;

/// The application protocols the origin offers over TLS, in its order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// HTTP/1.1 only (`http/1.1`).
    Http1,
    /// HTTP/2 preferred, HTTP/1.1 for clients without it (`h2`, `http/1.1`).
    Http2,
    /// HTTP/3 (`h3`), for the QUIC origin ([`crate::h3`]).
    Http3,
}

/// How the origin's TLS behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsOptions {
    pub alpn: Alpn,
    /// Session tickets (TLS 1.3 resumption): a client's later connections skip the certificate
    /// exchange. Off: every connection is a full handshake.
    pub resumption: bool,
    /// Accept 0-RTT early data on resumed sessions (up to 16 KiB; needs `resumption`).
    pub early_data: bool,
}

impl Default for TlsOptions {
    fn default() -> TlsOptions {
        TlsOptions {
            alpn: Alpn::Http2,
            resumption: true,
            early_data: false,
        }
    }
}

/// The largest 0-RTT data the origin accepts when `early_data` is on.
pub const EARLY_DATA_BYTES: u32 = 16 * 1024;

/// A certificate authority and one leaf certificate it signed, generated for this run only.
pub struct TestPki {
    ca_pem: String,
    leaf: CertificateDer<'static>,
    ca: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
    spki_sha256: String,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("spki_sha256", &self.spki_sha256)
            .finish_non_exhaustive()
    }
}

fn tls_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Tls(format!("{what}: {e}"))
}

impl TestPki {
    /// A fresh CA (ECDSA P-256) and a leaf for `names` (IP addresses or DNS names), valid for
    /// serving TLS.
    pub fn generate(names: &[String]) -> Result<TestPki, Error> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let ca_key = KeyPair::generate().map_err(|e| tls_error("CA key", e))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| tls_error("CA parameters", e))?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "satstp test CA (this run only)");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params
            .self_signed(&ca_key)
            .map_err(|e| tls_error("CA certificate", e))?;
        let leaf_key = KeyPair::generate().map_err(|e| tls_error("leaf key", e))?;
        let mut params =
            CertificateParams::new(names.to_vec()).map_err(|e| tls_error("leaf names", e))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "satstp test origin");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params
            .signed_by(&leaf_key, &ca, &ca_key)
            .map_err(|e| tls_error("leaf certificate", e))?;
        let spki = leaf_key.public_key_der();
        let spki_sha256 =
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&spki));
        Ok(TestPki {
            ca_pem: ca.pem(),
            ca: ca.der().clone(),
            leaf: leaf.der().clone(),
            key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
            spki_sha256,
        })
    }

    /// The CA certificate (PEM), for a client that trusts this run's origin only.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate (DER).
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca
    }

    /// Base64 of the SHA-256 of the leaf's SubjectPublicKeyInfo: Chromium's
    /// `--ignore-certificate-errors-spki-list` value.
    pub fn spki_sha256(&self) -> &str {
        &self.spki_sha256
    }

    /// The origin's TLS 1.3 server configuration with these options.
    pub fn server_config(&self, options: TlsOptions) -> Result<Arc<rustls::ServerConfig>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_error("TLS versions", e))?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.leaf.clone(), self.ca.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .map_err(|e| tls_error("server certificate", e))?;
        config.alpn_protocols = match options.alpn {
            Alpn::Http1 => vec![b"http/1.1".to_vec()],
            Alpn::Http2 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Alpn::Http3 => vec![b"h3".to_vec()],
        };
        if options.resumption {
            config.session_storage = rustls::server::ServerSessionMemoryCache::new(1024);
            config.ticketer =
                rustls::crypto::ring::Ticketer::new().map_err(|e| tls_error("tickets", e))?;
            config.send_tls13_tickets = 2;
            if options.early_data {
                config.max_early_data_size = EARLY_DATA_BYTES;
            }
        } else {
            config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(Arc::new(config))
    }

    /// A client configuration that trusts this run's CA only (for tests and the kit's clients).
    pub fn client_config(&self, alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>, Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca.clone())
            .map_err(|e| tls_error("CA certificate", e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_error("TLS versions", e))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpConn;
    use crate::origin::{Origin, OriginConfig};
    use crate::pattern;

    async fn origin(pki: &TestPki, options: TlsOptions) -> Origin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Origin::start(
            listener,
            OriginConfig {
                tls: Some(pki.server_config(options).unwrap()),
                ..OriginConfig::default()
            },
        )
    }

    async fn connect(
        pki: &TestPki,
        origin: &Origin,
        alpn: &[&[u8]],
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let tcp = tokio::net::TcpStream::connect(origin.addr()).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        tokio_rustls::TlsConnector::from(pki.client_config(alpn).unwrap())
            .connect(name, tcp)
            .await
            .expect("handshake with the run's CA")
    }

    #[tokio::test]
    async fn https_http1_and_http2_serve_checked_bytes() {
        let pki = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(pki.spki_sha256())
                .unwrap()
                .len(),
            32
        );
        let origin = origin(&pki, TlsOptions::default()).await;

        // HTTP/1.1 over TLS: the kit's own client, every byte checked.
        let s = connect(&pki, &origin, &[b"http/1.1"]).await;
        assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        let mut c = HttpConn::new(s);
        c.get(3, 300_001).await.unwrap();
        c.post(4, 200_000).await.unwrap();

        // HTTP/2: two streams at once on one connection, each body the pattern.
        let s = connect(&pki, &origin, &[b"h2", b"http/1.1"]).await;
        assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (client, conn) = h2::client::handshake(s).await.unwrap();
        tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let mut answers = Vec::new();
        for (key, n) in [(5u64, 1_000_000u64), (6, 70_000)] {
            let req = ::http::Request::get(format!("https://127.0.0.1/bytes/{n}/{key}"))
                .body(())
                .unwrap();
            let (answer, _) = client.send_request(req, true).unwrap();
            answers.push((key, n, answer));
            client = client.ready().await.unwrap();
        }
        // Read at once, as a browser does (one unread stream would hold the connection's
        // window).
        let readers: Vec<_> = answers
            .into_iter()
            .map(|(key, n, answer)| {
                tokio::spawn(async move {
                    let answer = answer.await.unwrap();
                    assert_eq!(answer.status(), 200);
                    let mut body = answer.into_body();
                    let mut check = pattern::Checker::new(key);
                    while let Some(piece) = body.data().await {
                        let piece = piece.unwrap();
                        check.update(&piece);
                        body.flow_control().release_capacity(piece.len()).unwrap();
                    }
                    check.finish(n).unwrap();
                })
            })
            .collect();
        for r in readers {
            r.await.unwrap();
        }
        let req = ::http::Request::get("https://127.0.0.1/favicon.ico")
            .body(())
            .unwrap();
        let (answer, _) = client.send_request(req, true).unwrap();
        assert_eq!(answer.await.unwrap().status(), 404);
        assert_eq!(origin.not_found().first, ["GET /favicon.ico HTTP/2"]);
        assert!(origin.errors().is_empty(), "{:?}", origin.errors());
    }

    /// A reader slower than the origin (a satellite link, a full socket) still gets every byte
    /// of an HTTPS/HTTP/1.1 answer, and the next one: the origin flushes its TLS layer after each
    /// answer.
    #[tokio::test]
    async fn a_slow_https_reader_gets_the_whole_answer() {
        let pki = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        let origin = origin(
            &pki,
            TlsOptions {
                alpn: Alpn::Http1,
                ..TlsOptions::default()
            },
        )
        .await;
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.connect(&origin.addr().into()).unwrap();
        sock.set_nonblocking(true).unwrap();
        let tcp = tokio::net::TcpStream::from_std(sock.into()).unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let s = tokio_rustls::TlsConnector::from(pki.client_config(&[b"http/1.1"]).unwrap())
            .connect(name, tcp)
            .await
            .unwrap();
        let mut c = HttpConn::new(s);
        // A 4 KiB receive buffer: the origin's socket is full most of the time.
        for key in 1..=3u64 {
            tokio::time::timeout(
                std::time::Duration::from_secs(20),
                c.get(key, 3_000_000 + key),
            )
            .await
            .expect("the answer's last bytes arrive")
            .unwrap();
        }
    }

    #[tokio::test]
    async fn a_client_that_does_not_trust_the_run_ca_is_refused() {
        let pki = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        let other = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        assert_ne!(pki.spki_sha256(), other.spki_sha256());
        let origin = origin(&pki, TlsOptions::default()).await;
        let tcp = tokio::net::TcpStream::connect(origin.addr()).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let e = tokio_rustls::TlsConnector::from(other.client_config(&[b"h2"]).unwrap())
            .connect(name, tcp)
            .await
            .expect_err("another run's CA does not vouch for this origin");
        assert!(e.to_string().contains("certificate"), "{e}");
    }

    #[tokio::test]
    async fn resumption_off_sends_no_tickets_and_on_resumes() {
        let pki = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        for resumption in [false, true] {
            let options = TlsOptions {
                alpn: Alpn::Http1,
                resumption,
                early_data: false,
            };
            let origin = origin(&pki, options).await;
            // One client configuration (its session cache) for both connections.
            let config = pki.client_config(&[b"http/1.1"]).unwrap();
            let mut kinds = Vec::new();
            for _ in 0..2 {
                let tcp = tokio::net::TcpStream::connect(origin.addr()).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                let s = tokio_rustls::TlsConnector::from(Arc::clone(&config))
                    .connect(name, tcp)
                    .await
                    .unwrap();
                let mut c = HttpConn::new(s);
                // The tickets arrive after the handshake, with the first answer.
                c.get(1, 10).await.unwrap();
                kinds.push(c.get_mut().get_ref().1.handshake_kind());
            }
            let resumed = Some(rustls::HandshakeKind::Resumed);
            assert_eq!(kinds[0], Some(rustls::HandshakeKind::Full));
            assert_eq!(kinds[1] == resumed, resumption, "{kinds:?}");
        }
    }
}
