//! Batched UDP I/O for the hop's socket. On Linux a run of equal-sized datagrams to one
//! destination leaves in one system call (generic segmentation offload, `UDP_SEGMENT`), and runs
//! of datagrams from one source arrive coalesced in one (`UDP_GRO`), with the size of their
//! segments beside them. The datagrams on the wire are the same as with one call per datagram.
//! Where the kernel lacks either feature, or refuses a segmented send, this falls back to one
//! datagram per call for good.

use std::io;
use std::net::SocketAddr;
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Most segments in one segmented send (the kernel's limit is 64 on older kernels).
pub(crate) const MAX_SEGMENTS: usize = 64;
/// Most payload bytes in one segmented send: a UDP datagram's payload limit over IPv4
/// (65535 − 20 − 8); IPv6 allows slightly more, this stays below both.
pub(crate) const MAX_BATCH_BYTES: usize = 65_507;

/// One socket's batching capabilities, found out once.
pub(crate) struct UdpBatch {
    /// Segmented sends are accepted (cleared after the first refusal).
    gso: bool,
    /// The kernel may hand over coalesced datagrams (with a segment size beside them).
    gro: bool,
    /// The kernel reports its receive-buffer drops beside each datagram (`SO_RXQ_OVFL`).
    overflow_count: bool,
}

/// What one receive call produced: `len` bytes at the front of the buffer, datagrams of
/// `segment` bytes each (the last may be shorter), all from `from`; and, where the kernel
/// reports it (`SO_RXQ_OVFL`), how many datagrams it has dropped on this socket since it was
/// opened because its receive buffer was full.
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) segment: usize,
    pub(crate) from: SocketAddr,
    pub(crate) overflows: Option<u32>,
}

impl UdpBatch {
    /// Enables receive coalescing on `socket` and checks for segmented sends.
    pub(crate) fn new(socket: &UdpSocket) -> UdpBatch {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = socket.as_raw_fd();
            let gso = sys::get_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
            let gro = sys::set_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
            let overflow_count = sys::set_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1).is_ok();
            UdpBatch {
                gso,
                gro,
                overflow_count,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = socket;
            UdpBatch {
                gso: false,
                gro: false,
                overflow_count: false,
            }
        }
    }

    /// Whether `send` passes several segments to the kernel at once.
    pub(crate) fn segments_sends(&self) -> bool {
        self.gso
    }

    /// Sends `data` to `dest` as datagrams of `segment` bytes (the last may be shorter), waiting
    /// while the socket's send buffer is full.
    pub(crate) async fn send(
        &mut self,
        socket: &UdpSocket,
        data: &[u8],
        segment: usize,
        dest: SocketAddr,
    ) -> io::Result<()> {
        let segment = segment.max(1);
        if data.len() <= segment {
            return socket.send_to(data, dest).await.map(|_| ());
        }
        #[cfg(target_os = "linux")]
        if self.gso {
            use std::os::fd::AsRawFd;
            let fd = socket.as_raw_fd();
            let seg = u16::try_from(segment).unwrap_or(u16::MAX);
            loop {
                socket.writable().await?;
                match socket.try_io(Interest::WRITABLE, || {
                    sys::send_segmented(fd, data, seg, dest)
                }) {
                    Ok(_) => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) if sys::gso_refused(&e) => {
                        // This path cannot segment (no checksum offload, old kernel, segments
                        // above the route's MTU): stop trying, and send this batch one by one.
                        self.gso = false;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let mut result = Ok(());
        for d in data.chunks(segment) {
            if let Err(e) = socket.send_to(d, dest).await {
                result = Err(e);
            }
        }
        result
    }

    /// Receives what is queued without waiting (`WouldBlock` when nothing is).
    pub(crate) fn try_recv(&self, socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Received> {
        #[cfg(target_os = "linux")]
        if self.gro || self.overflow_count {
            use std::os::fd::AsRawFd;
            let fd = socket.as_raw_fd();
            return socket.try_io(Interest::READABLE, || sys::recv_coalesced(fd, buf));
        }
        let (len, from) = socket.try_recv_from(buf)?;
        Ok(Received {
            len,
            segment: len,
            from,
            overflows: None,
        })
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use super::Received;
    use std::io;
    use std::mem::{size_of, zeroed};
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
    use std::os::fd::RawFd;

    pub(super) fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for writes of the sizes passed.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                level,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            Ok(v)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(super) fn set_int(
        fd: RawFd,
        level: libc::c_int,
        name: libc::c_int,
        v: i32,
    ) -> io::Result<()> {
        // SAFETY: `v` is a valid c_int for reads of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Errors meaning the kernel or the route cannot segment, as opposed to a send that failed.
    /// `EMSGSIZE`: the segments are larger than the route's MTU allows (the kernel fragments a
    /// single datagram of that size, but never a segmented send), so every batch would fail.
    pub(super) fn gso_refused(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::EIO)
                | Some(libc::EINVAL)
                | Some(libc::EOPNOTSUPP)
                | Some(libc::ENOPROTOOPT)
                | Some(libc::EMSGSIZE)
        )
    }

    /// A socket address in the kernel's layout.
    fn to_raw(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                let sin = unsafe {
                    &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
                };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                let sin6 = unsafe {
                    &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
                };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_flowinfo = a.flowinfo();
                sin6.sin6_addr.s6_addr = a.ip().octets();
                sin6.sin6_scope_id = a.scope_id();
                size_of::<libc::sockaddr_in6>()
            }
        };
        (ss, len as libc::socklen_t)
    }

    fn from_raw(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
        let len = len as usize;
        match libc::c_int::from(ss.ss_family) {
            libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: the family and length say the storage holds a sockaddr_in.
                let sin =
                    unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: the family and length say the storage holds a sockaddr_in6.
                let sin6 =
                    unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }

    /// Control buffer for one cmsg with an int: 8-byte aligned, larger than CMSG_SPACE(4).
    #[repr(C, align(8))]
    struct Control([u8; 64]);

    /// One `sendmsg` of `data` to `dest`, segmented by the kernel into `segment`-byte datagrams.
    pub(super) fn send_segmented(
        fd: RawFd,
        data: &[u8],
        segment: u16,
        dest: SocketAddr,
    ) -> io::Result<usize> {
        let (mut name, name_len) = to_raw(dest);
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let mut control = Control([0; 64]);
        // SAFETY: an all-zero msghdr is valid; every pointer set below outlives the call, and
        // the cmsg written lies within `control` (CMSG_SPACE of a u16 is far below 64 bytes).
        let n = unsafe {
            let mut msg: libc::msghdr = zeroed();
            msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
            msg.msg_namelen = name_len;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            (*cmsg).cmsg_level = libc::SOL_UDP;
            (*cmsg).cmsg_type = libc::UDP_SEGMENT;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
            libc::sendmsg(fd, &msg, 0)
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// One `recvmsg` into `buf`; the segment size comes from the `UDP_GRO` cmsg when the kernel
    /// coalesced datagrams, else the datagram is one segment; the drop count from the
    /// `SO_RXQ_OVFL` cmsg when the socket asked for it.
    pub(super) fn recv_coalesced(fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let mut name: libc::sockaddr_storage = unsafe { zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = Control([0; 64]);
        // SAFETY: an all-zero msghdr is valid; every pointer set below outlives the call and
        // the lengths passed are those of the buffers pointed to. The kernel bounds
        // msg_controllen by the buffer; the CMSG_* walk stays within it.
        unsafe {
            let mut msg: libc::msghdr = zeroed();
            msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = control.0.len() as _;
            let n = libc::recvmsg(fd, &mut msg, 0);
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let len = n as usize;
            let mut segment = len;
            let mut overflows = None;
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == libc::UDP_GRO {
                    let s = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                    if s > 0 {
                        segment = s as usize;
                    }
                } else if (*cmsg).cmsg_level == libc::SOL_SOCKET
                    && (*cmsg).cmsg_type == libc::SO_RXQ_OVFL
                {
                    overflows = Some(std::ptr::read_unaligned(
                        libc::CMSG_DATA(cmsg).cast::<u32>(),
                    ));
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
            let from = from_raw(&name, msg.msg_namelen)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
            Ok(Received {
                len,
                segment,
                from,
                overflows,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Four datagrams (three of 1000 bytes, one of 500), each byte naming its datagram.
    fn run() -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut data = Vec::new();
        let mut each = Vec::new();
        for (i, len) in [1000usize, 1000, 1000, 500].into_iter().enumerate() {
            let d: Vec<u8> = (0..len).map(|k| (i * 31 + k) as u8).collect();
            data.extend_from_slice(&d);
            each.push(d);
        }
        (data, each)
    }

    async fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        (a, b)
    }

    /// Receives `n` datagrams through `batch`, splitting coalesced ones by their segment size.
    async fn receive(batch: &UdpBatch, sock: &UdpSocket, n: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        receive_counting(batch, sock, n).await.0
    }

    /// As [`receive`], also counting the receive calls that returned several datagrams.
    async fn receive_counting(
        batch: &UdpBatch,
        sock: &UdpSocket,
        n: usize,
    ) -> (Vec<(Vec<u8>, SocketAddr)>, usize) {
        let mut out = Vec::new();
        let mut coalesced = 0;
        let mut buf = vec![0u8; 65_536];
        while out.len() < n {
            tokio::time::timeout(Duration::from_secs(5), sock.readable())
                .await
                .expect("datagrams within 5 s")
                .expect("readable");
            while let Ok(got) = batch.try_recv(sock, &mut buf) {
                if got.len > got.segment {
                    coalesced += 1;
                }
                for d in buf[..got.len].chunks(got.segment) {
                    out.push((d.to_vec(), got.from));
                }
            }
        }
        (out, coalesced)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_kernels_drops_at_a_full_receive_buffer_are_reported() {
        // A socket with the smallest receive buffer, sent far more than it holds before it
        // reads: the kernel drops the rest and says how many beside the datagrams that follow.
        let (tx, rx) = pair().await;
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(4096)
            .expect("SO_RCVBUF");
        let receiver = UdpBatch::new(&rx);
        assert!(receiver.overflow_count, "SO_RXQ_OVFL refused");
        let to = rx.local_addr().unwrap();
        let datagram = [7u8; 1000];
        for _ in 0..200 {
            tx.send_to(&datagram, to).await.expect("send");
        }
        let mut buf = vec![0u8; 65_536];
        let (mut received, mut reported) = (0, None);
        // Waits for the socket, then takes all it holds: datagrams, and the last drop count.
        let mut drain = async |buf: &mut Vec<u8>| {
            tokio::time::timeout(Duration::from_secs(5), rx.readable())
                .await
                .expect("datagrams within 5 s")
                .expect("readable");
            while let Ok(got) = receiver.try_recv(&rx, buf) {
                received += got.len / got.segment.max(1);
                reported = got.overflows.or(reported);
            }
        };
        drain(&mut buf).await;
        // One more after the buffer drained carries the total so far.
        tx.send_to(&datagram, to).await.expect("send");
        drain(&mut buf).await;
        let dropped = reported.expect("no drop count beside the datagrams") as usize;
        assert!(received < 200, "a 4 KiB buffer held all 200 datagrams");
        assert_eq!(
            received + dropped,
            201,
            "{received} received and {dropped} reported dropped of 201 sent"
        );
    }

    #[tokio::test]
    async fn coalesced_receives_split_into_the_datagrams_sent() {
        // A segmented send on loopback reaches a UDP_GRO socket as one coalesced buffer with
        // its segment size beside it (the kernel does not split it for such a socket); the
        // receive splits it back into the datagrams, also after a short last one, and a run
        // of datagrams of another size arrives as its own datagrams.
        let (tx, rx) = pair().await;
        let mut sender = UdpBatch::new(&tx);
        let receiver = UdpBatch::new(&rx);
        if !(sender.gso && receiver.gro) {
            let why = format!(
                "this kernel offers no UDP_SEGMENT ({}) or UDP_GRO ({})",
                sender.gso, receiver.gro
            );
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("skipped: {why}");
            return;
        }
        let dest = rx.local_addr().expect("addr");
        let (data, mut each) = run();
        sender.send(&tx, &data, 1000, dest).await.expect("send");
        let second: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1443]).collect();
        sender
            .send(&tx, &second.concat(), 1443, dest)
            .await
            .expect("send");
        each.extend(second);
        let (got, coalesced) = receive_counting(&receiver, &rx, each.len()).await;
        let datagrams: Vec<Vec<u8>> = got.iter().map(|(d, _)| d.clone()).collect();
        assert_eq!(datagrams, each);
        assert!(
            coalesced >= 1,
            "two segmented sends of 4 and 5 datagrams arrived in {} receives, none coalesced",
            got.len()
        );
    }

    #[tokio::test]
    async fn a_run_arrives_as_the_same_datagrams_with_and_without_offload() {
        let (data, each) = run();
        for (send_gso, recv_gro) in [(true, true), (true, false), (false, true), (false, false)] {
            let (tx, rx) = pair().await;
            let mut sender = UdpBatch::new(&tx);
            sender.gso &= send_gso;
            let mut receiver = UdpBatch::new(&rx);
            receiver.gro &= recv_gro;
            if !recv_gro {
                // A plain receiver: the kernel must deliver separate datagrams.
                let fresh = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
                let dest = fresh.local_addr().expect("addr");
                sender.send(&tx, &data, 1000, dest).await.expect("send");
                let mut buf = [0u8; 2048];
                for d in &each {
                    let (n, from) =
                        tokio::time::timeout(Duration::from_secs(5), fresh.recv_from(&mut buf))
                            .await
                            .expect("datagram within 5 s")
                            .expect("recv");
                    assert_eq!(&buf[..n], &d[..], "gso {send_gso}");
                    assert_eq!(from, tx.local_addr().expect("addr"));
                }
                continue;
            }
            let dest = rx.local_addr().expect("addr");
            sender.send(&tx, &data, 1000, dest).await.expect("send");
            let got = receive(&receiver, &rx, each.len()).await;
            let datagrams: Vec<Vec<u8>> = got.iter().map(|(d, _)| d.clone()).collect();
            assert_eq!(datagrams, each, "gso {send_gso} gro {recv_gro}");
            assert!(got
                .iter()
                .all(|(_, from)| *from == tx.local_addr().expect("addr")));
        }
    }

    #[tokio::test]
    async fn a_single_datagram_is_sent_plainly() {
        let (tx, rx) = pair().await;
        let mut sender = UdpBatch::new(&tx);
        let receiver = UdpBatch::new(&rx);
        let dest = rx.local_addr().expect("addr");
        sender.send(&tx, b"hello", 1452, dest).await.expect("send");
        let got = receive(&receiver, &rx, 1).await;
        assert_eq!(got[0].0, b"hello");
    }
}
