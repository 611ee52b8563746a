//! The server side of SOCKS5 (RFC 1928, CONNECT only) with username/password authentication
//! (RFC 1929): the SOCKS5 edge of the stream protocol ([`crate::stream`]): a request's
//! destination is a [`Target`], and a [`Verdict`] maps to the reply code sent back.
//!
//! The parsers ([`parse_greeting`], [`parse_user_pass`], [`parse_request`]) are sans-IO: they
//! look at the bytes received so far and return `Ok(None)` when more are needed, the parsed
//! message and its length when it is complete, or an error as soon as the bytes cannot begin a
//! valid message. No SOCKS5 message is longer than [`MAX_MESSAGE_LEN`] bytes, so a driver never
//! needs to buffer more than that. [`accept`] drives them over an async stream.
//!
//! Domain names follow the stream protocol's rules ([`crate::stream::TargetError`]). The reserved byte of a request is
//! ignored, as most servers do.

use crate::stream::{Target, TargetError, Verdict};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The SOCKS protocol version this module speaks.
pub(crate) const SOCKS_VERSION: u8 = 5;
/// The version byte of the RFC 1929 username/password sub-negotiation.
pub(crate) const USER_PASS_VERSION: u8 = 1;
/// Upper bound on the length of any SOCKS5 message this module reads (the largest possible is a
/// username/password request: 3 + 255 + 255 = 513 bytes).
pub(crate) const MAX_MESSAGE_LEN: usize = 600;

/// Authentication method "no authentication required".
pub(crate) const METHOD_NO_AUTH: u8 = 0x00;
/// Authentication method "username/password" (RFC 1929).
pub(crate) const METHOD_USER_PASS: u8 = 0x02;
/// Method-selection answer "no acceptable methods".
pub(crate) const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;

const CMD_CONNECT: u8 = 1;

/// The reply codes of RFC 1928 section 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Reply {
    Succeeded = 0,
    GeneralFailure = 1,
    NotAllowed = 2,
    NetworkUnreachable = 3,
    HostUnreachable = 4,
    ConnectionRefused = 5,
    CommandNotSupported = 7,
    AddressTypeNotSupported = 8,
}

impl From<Verdict> for Reply {
    /// The reply a SOCKS5 client gets for the gateway's verdict.
    fn from(v: Verdict) -> Reply {
        match v {
            Verdict::Connected => Reply::Succeeded,
            Verdict::Failed => Reply::GeneralFailure,
            Verdict::PolicyDenied => Reply::NotAllowed,
            Verdict::NetworkUnreachable => Reply::NetworkUnreachable,
            Verdict::HostUnreachable => Reply::HostUnreachable,
            Verdict::Refused => Reply::ConnectionRefused,
        }
    }
}

/// The reply to a request: `code`, and the address the gateway bound for the connection
/// (`0.0.0.0:0` when `None`, as clients of a CONNECT do not use it).
pub(crate) fn reply(code: Reply, bound: Option<SocketAddr>) -> Vec<u8> {
    let bound = bound.unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)));
    let mut out = vec![SOCKS_VERSION, code as u8, 0];
    Target::Ip(bound).encode(&mut out);
    out
}

/// A client's greeting: the authentication methods it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub methods: Vec<u8>,
}

/// A username/password sub-negotiation request (RFC 1929). The `Debug` output hides the
/// password.
#[derive(Clone, PartialEq, Eq)]
pub struct UserPass {
    pub username: Vec<u8>,
    pub password: Vec<u8>,
}

impl fmt::Debug for UserPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserPass")
            .field("username", &String::from_utf8_lossy(&self.username))
            .field("password", &"<hidden>")
            .finish()
    }
}

/// How the server authenticates clients.
#[derive(Clone, PartialEq, Eq)]
pub enum SocksAuth {
    /// No authentication ("no authentication required" is the only method accepted).
    None,
    /// Username/password (RFC 1929) against this list of (username, password); it is the only
    /// method accepted.
    UserPass(Vec<(String, String)>),
}

impl fmt::Debug for SocksAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SocksAuth::None => f.write_str("None"),
            SocksAuth::UserPass(users) => write!(f, "UserPass({} users)", users.len()),
        }
    }
}

impl SocksAuth {
    /// The method this server picks among those offered, if any.
    pub(crate) fn select_method(&self, offered: &[u8]) -> Option<u8> {
        let wanted = match self {
            SocksAuth::None => METHOD_NO_AUTH,
            SocksAuth::UserPass(_) => METHOD_USER_PASS,
        };
        offered.contains(&wanted).then_some(wanted)
    }

    /// Whether `credentials` match an entry (always false for [`SocksAuth::None`]). Every entry
    /// is compared in full, so the time taken does not tell which byte differed.
    pub(crate) fn verify(&self, credentials: &UserPass) -> bool {
        match self {
            SocksAuth::None => false,
            SocksAuth::UserPass(users) => users.iter().fold(false, |found, (user, pass)| {
                let user_ok = same_bytes(user.as_bytes(), &credentials.username);
                let pass_ok = same_bytes(pass.as_bytes(), &credentials.password);
                found | (user_ok & pass_ok)
            }),
        }
    }
}

/// Byte-string equality whose time depends only on the lengths.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a SOCKS5 exchange failed.
#[derive(Debug, Error)]
pub enum SocksError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("client closed the connection before a complete message")]
    Closed,
    #[error("not SOCKS5: version byte {0}")]
    BadVersion(u8),
    #[error("unknown username/password sub-negotiation version {0}")]
    BadAuthVersion(u8),
    #[error("client offered no acceptable authentication method (offered {0:?})")]
    NoAcceptableMethod(Vec<u8>),
    #[error("username/password authentication failed for user {0:?}")]
    AuthFailed(String),
    #[error("command {0} not supported (only CONNECT)")]
    CommandNotSupported(u8),
    #[error("address type {0} not supported")]
    AddressTypeNotSupported(u8),
    #[error("bad destination: {0}")]
    BadTarget(TargetError),
    #[error("message longer than {MAX_MESSAGE_LEN} bytes")]
    TooLong,
}

impl SocksError {
    /// The reply code to send when this error ends a request, if a reply is due.
    pub(crate) fn reply_code(&self) -> Option<Reply> {
        match self {
            SocksError::CommandNotSupported(_) => Some(Reply::CommandNotSupported),
            SocksError::AddressTypeNotSupported(_) => Some(Reply::AddressTypeNotSupported),
            SocksError::BadTarget(_) => Some(Reply::GeneralFailure),
            _ => None,
        }
    }
}

/// Progress of an internal parser: done, or the total length needed before more can be said.
enum Parse<T> {
    Done(T, usize),
    Need(usize),
}

impl<T> Parse<T> {
    fn into_option(self) -> Option<(T, usize)> {
        match self {
            Parse::Done(v, n) => Some((v, n)),
            Parse::Need(_) => None,
        }
    }
}

fn greeting(buf: &[u8]) -> Result<Parse<Greeting>, SocksError> {
    let Some(&version) = buf.first() else {
        return Ok(Parse::Need(2));
    };
    if version != SOCKS_VERSION {
        return Err(SocksError::BadVersion(version));
    }
    let Some(&n) = buf.get(1) else {
        return Ok(Parse::Need(2));
    };
    let end = 2 + usize::from(n);
    match buf.get(2..end) {
        Some(methods) => Ok(Parse::Done(
            Greeting {
                methods: methods.to_vec(),
            },
            end,
        )),
        None => Ok(Parse::Need(end)),
    }
}

fn user_pass(buf: &[u8]) -> Result<Parse<UserPass>, SocksError> {
    let Some(&version) = buf.first() else {
        return Ok(Parse::Need(2));
    };
    if version != USER_PASS_VERSION {
        return Err(SocksError::BadAuthVersion(version));
    }
    let Some(&ulen) = buf.get(1) else {
        return Ok(Parse::Need(2));
    };
    let user_end = 2 + usize::from(ulen);
    let Some(username) = buf.get(2..user_end) else {
        return Ok(Parse::Need(user_end + 1));
    };
    let Some(&plen) = buf.get(user_end) else {
        return Ok(Parse::Need(user_end + 1));
    };
    let end = user_end + 1 + usize::from(plen);
    match buf.get(user_end + 1..end) {
        Some(password) => Ok(Parse::Done(
            UserPass {
                username: username.to_vec(),
                password: password.to_vec(),
            },
            end,
        )),
        None => Ok(Parse::Need(end)),
    }
}

fn request(buf: &[u8]) -> Result<Parse<Target>, SocksError> {
    let Some(&version) = buf.first() else {
        return Ok(Parse::Need(4));
    };
    if version != SOCKS_VERSION {
        return Err(SocksError::BadVersion(version));
    }
    let Some(&command) = buf.get(1) else {
        return Ok(Parse::Need(4));
    };
    if command != CMD_CONNECT {
        return Err(SocksError::CommandNotSupported(command));
    }
    // buf[2] is the reserved byte, ignored; the address follows in the stream header's form.
    let Some(addr) = buf.get(3..).filter(|a| !a.is_empty()) else {
        return Ok(Parse::Need(4));
    };
    match Target::decode(addr) {
        Ok((target, len)) => Ok(Parse::Done(target, 3 + len)),
        Err(TargetError::Truncated { needed, .. }) => Ok(Parse::Need(3 + needed)),
        Err(TargetError::UnknownKind(k)) => Err(SocksError::AddressTypeNotSupported(k)),
        Err(e) => Err(SocksError::BadTarget(e)),
    }
}

/// Parses a client greeting (`VER NMETHODS METHODS...`) from the start of `buf`.
pub fn parse_greeting(buf: &[u8]) -> Result<Option<(Greeting, usize)>, SocksError> {
    greeting(buf).map(Parse::into_option)
}

/// Parses a username/password request (`VER ULEN UNAME PLEN PASSWD`) from the start of `buf`.
pub fn parse_user_pass(buf: &[u8]) -> Result<Option<(UserPass, usize)>, SocksError> {
    user_pass(buf).map(Parse::into_option)
}

/// Parses a request (`VER CMD RSV ATYP DST.ADDR DST.PORT`) from the start of `buf`. Only
/// CONNECT is accepted; [`SocksError::reply_code`] gives the reply due for an error.
pub fn parse_request(buf: &[u8]) -> Result<Option<(Target, usize)>, SocksError> {
    request(buf).map(Parse::into_option)
}

/// Reads one message with `parse`, never reading past its end (bytes a client sends after it
/// stay in the stream).
async fn read_message<S, T>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Result<Parse<T>, SocksError>,
) -> Result<Result<T, SocksError>, SocksError>
where
    S: AsyncRead + Unpin,
{
    buf.clear();
    loop {
        match parse(buf) {
            Err(e) => return Ok(Err(e)),
            Ok(Parse::Done(value, _)) => return Ok(Ok(value)),
            Ok(Parse::Need(n)) => {
                if n > MAX_MESSAGE_LEN || n <= buf.len() {
                    return Err(SocksError::TooLong);
                }
                let have = buf.len();
                buf.resize(n, 0);
                let slice = buf.get_mut(have..n).ok_or(SocksError::TooLong)?;
                stream.read_exact(slice).await.map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        SocksError::Closed
                    } else {
                        SocksError::Io(e)
                    }
                })?;
            }
        }
    }
}

/// Runs the server side of a SOCKS5 handshake on `stream` up to and including the request, and
/// returns the requested destination.
///
/// It answers the greeting (and the username/password sub-negotiation when `auth` asks for
/// it), sending `0xFF` when no offered method is acceptable. It does not send the reply to a
/// valid request: the caller sends [`reply`] once it knows the outcome. On an invalid request
/// it sends the failure reply ([`SocksError::reply_code`]) itself. Bytes the client sends after
/// its request are left unread in `stream`. Timeouts are the caller's concern.
pub(crate) async fn accept<S>(stream: &mut S, auth: &SocksAuth) -> Result<Target, SocksError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(MAX_MESSAGE_LEN);
    let hello = read_message(stream, &mut buf, greeting).await??;
    let Some(method) = auth.select_method(&hello.methods) else {
        stream
            .write_all(&[SOCKS_VERSION, METHOD_NONE_ACCEPTABLE])
            .await?;
        stream.flush().await?;
        return Err(SocksError::NoAcceptableMethod(hello.methods));
    };
    stream.write_all(&[SOCKS_VERSION, method]).await?;
    stream.flush().await?;
    if method == METHOD_USER_PASS {
        let credentials = read_message(stream, &mut buf, user_pass).await??;
        let ok = auth.verify(&credentials);
        stream
            .write_all(&[USER_PASS_VERSION, if ok { 0 } else { 1 }])
            .await?;
        stream.flush().await?;
        if !ok {
            return Err(SocksError::AuthFailed(
                String::from_utf8_lossy(&credentials.username).into_owned(),
            ));
        }
    }
    match read_message(stream, &mut buf, request).await? {
        Ok(target) => Ok(target),
        Err(e) => {
            if let Some(code) = e.reply_code() {
                stream.write_all(&reply(code, None)).await?;
                stream.flush().await?;
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv6Addr;
    use tokio::io::duplex;

    fn connect_v4() -> Vec<u8> {
        vec![5, 1, 0, 1, 93, 184, 216, 34, 0x01, 0xBB]
    }
    fn connect_v6() -> Vec<u8> {
        let mut v = vec![5, 1, 0, 4];
        v.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&[0x1F, 0x90]);
        v
    }
    fn connect_domain() -> Vec<u8> {
        let mut v = vec![5, 1, 0, 3, 11];
        v.extend_from_slice(b"example.com");
        v.extend_from_slice(&[0, 80]);
        v
    }
    fn user_pass_msg(user: &[u8], pass: &[u8]) -> Vec<u8> {
        let mut v = vec![1, user.len() as u8];
        v.extend_from_slice(user);
        v.push(pass.len() as u8);
        v.extend_from_slice(pass);
        v
    }

    /// Every strict prefix needs more bytes; the whole message parses with its full length.
    type Parser<T> = fn(&[u8]) -> Result<Option<(T, usize)>, SocksError>;

    fn byte_by_byte<T: PartialEq + fmt::Debug>(msg: &[u8], parse: Parser<T>) -> T {
        for n in 0..msg.len() {
            assert!(
                matches!(parse(&msg[..n]), Ok(None)),
                "prefix of {n} bytes should need more"
            );
        }
        let mut extended = msg.to_vec();
        extended.extend_from_slice(b"trailing");
        let (value, len) = parse(&extended).unwrap().unwrap();
        assert_eq!(len, msg.len());
        value
    }

    #[test]
    fn greeting_parses_byte_by_byte() {
        let g = byte_by_byte(&[5, 2, 0, 2], parse_greeting);
        assert_eq!(g.methods, vec![0, 2]);
        let g = byte_by_byte(&[5, 0], parse_greeting);
        assert!(g.methods.is_empty());
    }

    #[test]
    fn greeting_bad_version() {
        assert!(matches!(
            parse_greeting(&[4, 1, 0]),
            Err(SocksError::BadVersion(4))
        ));
        assert!(matches!(
            parse_request(&[4, 1, 0, 1]),
            Err(SocksError::BadVersion(4))
        ));
    }

    #[test]
    fn user_pass_parses_byte_by_byte() {
        let up = byte_by_byte(&user_pass_msg(b"alice", b"s3cret"), parse_user_pass);
        assert_eq!(up.username, b"alice");
        assert_eq!(up.password, b"s3cret");
        assert!(!format!("{up:?}").contains("s3cret"));
        assert!(matches!(
            parse_user_pass(&[5, 1, b'a', 1, b'b']),
            Err(SocksError::BadAuthVersion(5))
        ));
    }

    #[test]
    fn requests_parse_byte_by_byte() {
        assert_eq!(
            byte_by_byte(&connect_v4(), parse_request),
            Target::Ip("93.184.216.34:443".parse().unwrap())
        );
        assert_eq!(
            byte_by_byte(&connect_v6(), parse_request),
            Target::Ip("[2001:db8::1]:8080".parse().unwrap())
        );
        assert_eq!(
            byte_by_byte(&connect_domain(), parse_request),
            Target::domain("example.com", 80).unwrap()
        );
    }

    #[test]
    fn request_errors_and_their_replies() {
        for cmd in [2u8, 3, 9] {
            let e = parse_request(&[5, cmd]).unwrap_err();
            assert!(matches!(e, SocksError::CommandNotSupported(c) if c == cmd));
            assert_eq!(e.reply_code(), Some(Reply::CommandNotSupported));
        }
        let e = parse_request(&[5, 1, 0, 2]).unwrap_err();
        assert_eq!(e.reply_code(), Some(Reply::AddressTypeNotSupported));
        let e = parse_request(&[5, 1, 0, 3, 0]).unwrap_err();
        assert!(matches!(e, SocksError::BadTarget(TargetError::EmptyDomain)));
        assert_eq!(e.reply_code(), Some(Reply::GeneralFailure));
        let e = parse_request(&[5, 1, 0, 3, 3, b'a', b' ', b'b', 0, 80]).unwrap_err();
        assert!(matches!(e, SocksError::BadTarget(TargetError::BadDomain)));
    }

    #[test]
    fn reply_encoding() {
        assert_eq!(
            reply(Reply::Succeeded, None),
            vec![5, 0, 0, 1, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            reply(
                Reply::ConnectionRefused,
                Some("10.1.2.3:4660".parse().unwrap())
            ),
            vec![5, 5, 0, 1, 10, 1, 2, 3, 0x12, 0x34]
        );
        let v6 = reply(Reply::Succeeded, Some("[::1]:1".parse().unwrap()));
        assert_eq!(v6.len(), 4 + 16 + 2);
        assert_eq!(v6[3], 4);
        assert_eq!(Reply::AddressTypeNotSupported as u8, 8);
    }

    #[test]
    fn verdicts_map_to_their_reply_codes() {
        // The wire byte of a verdict is the SOCKS5 reply code a client gets for it.
        for v in Verdict::ALL {
            assert_eq!(Reply::from(v) as u8, v.to_byte(), "{v:?}");
        }
    }

    fn users() -> SocksAuth {
        SocksAuth::UserPass(vec![("alice".into(), "s3cret".into())])
    }

    #[tokio::test]
    async fn accept_no_auth_domain_leaves_later_bytes() {
        let (mut client, mut server) = duplex(1024);
        let mut input = vec![5, 1, 0];
        input.extend_from_slice(&connect_domain());
        input.extend_from_slice(b"early data");
        client.write_all(&input).await.unwrap();
        let target = accept(&mut server, &SocksAuth::None).await.unwrap();
        assert_eq!(target, Target::domain("example.com", 80).unwrap());
        let mut answer = [0u8; 2];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(answer, [5, 0]);
        let mut rest = [0u8; 10];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"early data");
    }

    #[tokio::test]
    async fn accept_user_pass_ipv6_byte_by_byte() {
        let (mut client, mut server) = duplex(1024);
        let task = tokio::spawn(async move {
            let r = accept(&mut server, &users()).await;
            (r.map_err(|e| e.to_string()), server)
        });
        let mut input = vec![5, 2, 0, 2];
        input.extend_from_slice(&user_pass_msg(b"alice", b"s3cret"));
        input.extend_from_slice(&connect_v6());
        for b in input {
            client.write_all(&[b]).await.unwrap();
            tokio::task::yield_now().await;
        }
        let (result, _server) = task.await.unwrap();
        assert_eq!(
            result.unwrap(),
            Target::Ip("[2001:db8::1]:8080".parse().unwrap())
        );
        let mut answers = [0u8; 4];
        client.read_exact(&mut answers).await.unwrap();
        assert_eq!(answers, [5, 2, 1, 0]);
    }

    #[tokio::test]
    async fn accept_ipv4() {
        let (mut client, mut server) = duplex(1024);
        let mut input = vec![5, 1, 0];
        input.extend_from_slice(&connect_v4());
        client.write_all(&input).await.unwrap();
        let target = accept(&mut server, &SocksAuth::None).await.unwrap();
        assert_eq!(target, Target::Ip("93.184.216.34:443".parse().unwrap()));
    }

    #[tokio::test]
    async fn accept_wrong_password() {
        let (mut client, mut server) = duplex(1024);
        let mut input = vec![5, 1, 2];
        input.extend_from_slice(&user_pass_msg(b"alice", b"guess"));
        client.write_all(&input).await.unwrap();
        let e = accept(&mut server, &users()).await.unwrap_err();
        assert!(matches!(e, SocksError::AuthFailed(ref u) if u == "alice"));
        drop(server);
        let mut answers = Vec::new();
        client.read_to_end(&mut answers).await.unwrap();
        assert_eq!(answers, vec![5, 2, 1, 1]);
    }

    #[tokio::test]
    async fn accept_no_acceptable_method() {
        // Auth required, client offers only "no auth".
        let (mut client, mut server) = duplex(1024);
        client.write_all(&[5, 1, 0]).await.unwrap();
        let e = accept(&mut server, &users()).await.unwrap_err();
        assert!(matches!(e, SocksError::NoAcceptableMethod(_)));
        drop(server);
        let mut answers = Vec::new();
        client.read_to_end(&mut answers).await.unwrap();
        assert_eq!(answers, vec![5, 0xFF]);
        // No auth configured, client offers only username/password.
        let (mut client, mut server) = duplex(1024);
        client.write_all(&[5, 1, 2]).await.unwrap();
        assert!(accept(&mut server, &SocksAuth::None).await.is_err());
        drop(server);
        let mut answers = Vec::new();
        client.read_to_end(&mut answers).await.unwrap();
        assert_eq!(answers, vec![5, 0xFF]);
    }

    #[tokio::test]
    async fn accept_unsupported_command_replies_7() {
        let (mut client, mut server) = duplex(1024);
        // UDP ASSOCIATE.
        client
            .write_all(&[5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        let e = accept(&mut server, &SocksAuth::None).await.unwrap_err();
        assert!(matches!(e, SocksError::CommandNotSupported(3)));
        drop(server);
        let mut answers = Vec::new();
        client.read_to_end(&mut answers).await.unwrap();
        assert_eq!(&answers[..2], &[5, 0]);
        assert_eq!(&answers[2..4], &[5, 7]);
    }

    #[tokio::test]
    async fn accept_bad_version_and_early_close() {
        let (mut client, mut server) = duplex(1024);
        client.write_all(&[4, 1, 0, 80]).await.unwrap();
        assert!(matches!(
            accept(&mut server, &SocksAuth::None).await,
            Err(SocksError::BadVersion(4))
        ));
        let (mut client, mut server) = duplex(1024);
        client.write_all(&[5, 3, 0]).await.unwrap();
        drop(client);
        assert!(matches!(
            accept(&mut server, &SocksAuth::None).await,
            Err(SocksError::Closed)
        ));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            if let Ok(Some((_, n))) = parse_greeting(&bytes) { prop_assert!(n <= MAX_MESSAGE_LEN); }
            if let Ok(Some((_, n))) = parse_user_pass(&bytes) { prop_assert!(n <= MAX_MESSAGE_LEN); }
            if let Ok(Some((_, n))) = parse_request(&bytes) { prop_assert!(n <= MAX_MESSAGE_LEN); }
            let _ = Target::decode(&bytes);
        }

        #[test]
        fn accept_never_panics_on_garbage(mut bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            // Start most inputs as SOCKS5 so the later stages see garbage too.
            if let Some(first) = bytes.first_mut() { *first = 5; }
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let (mut client, mut server) = duplex(4096);
                client.write_all(&bytes).await.unwrap();
                drop(client);
                let _ = accept(&mut server, &SocksAuth::None).await;
                let _ = accept(&mut server, &users()).await;
            });
        }
    }
}
