//! One run of one contender: a fresh emulator, the origin in the gateway namespace, the daemons
//! of a split contender, then the client's transfers timed and checked (the kit's origin,
//! clients and page fetcher), the counters read around the download.

use super::daemons::Daemons;
use super::lan::Lan;
use super::system::{
    retrans_segs, scrape_metrics, set_congestion, tune_namespace, tune_tcp_hop_host,
};
use super::{
    BrowserSample, Contender, Plan, Protocol, Sample, BROWSER_CONNECTIONS, GATEWAY_METRICS_PORT,
    HTTPS_PORT, ORIGIN_PORT, SOCKS_PORT, TCP_MSS, WARM_UP_BYTES,
};
use crate::error::{Context, Result};
use linkem::{NetConfig, NetEmulator, NetStats, Side};
use loadgen::client::{Client, Dialer, Route};
use loadgen::origin::{Files, Origin, OriginConfig, SocketHook};
use loadgen::page::{self, Style};
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn measure(plan: &Plan, contender: Contender, run: u64, seed: u64) -> Result<Sample> {
    let mut config = NetConfig::from_profile(plan.profile);
    config.seed = seed.wrapping_add(run);
    let emu = NetEmulator::start(config).context("cannot start the IP-level emulator")?;
    let tns = emu.namespace(Side::Terminal).to_string();
    let gns = emu.namespace(Side::Gateway).to_string();
    for ns in [&tns, &gns] {
        tune_namespace(ns, plan.buffer)?;
    }
    if contender.tcp_hop().is_some() {
        let (down_bps, up_bps, rtt_ns) = plan.profile.parameters();
        let rtt_ms = u32::try_from(rtt_ns / 1_000_000).unwrap_or(u32::MAX);
        let terminal = pep::sizing::HopLink {
            send_rate_bps: up_bps,
            recv_rate_bps: down_bps,
            rtt_ms,
        };
        let gateway = pep::sizing::HopLink {
            send_rate_bps: down_bps,
            recv_rate_bps: up_bps,
            rtt_ms,
        };
        tune_tcp_hop_host(&tns, Side::Gateway.ipv4(), terminal)?;
        tune_tcp_hop_host(&gns, Side::Terminal.ipv4(), gateway)?;
    }
    let lan = match contender {
        Contender::SplitStpTproxy(_) => {
            let lan = Lan::create(&tns)?;
            tune_namespace(&lan.ns, plan.buffer)?;
            if plan.http == Protocol::H3 {
                lan.route(&tns, &gns)
                    .context("cannot route the LAN's QUIC through the terminal")?;
            }
            Some(lan)
        }
        _ => None,
    };
    let origin_addr = SocketAddrV4::new(Side::Gateway.ipv4(), ORIGIN_PORT);
    let cc = match contender {
        Contender::Kernel(cc) => Some(cc),
        _ => None,
    };
    let origin = start_origin(plan, &gns, origin_addr, cc, None, None)?;
    let https_addr = SocketAddrV4::new(Side::Gateway.ipv4(), HTTPS_PORT);
    // Over HTTP/3 the same site from a QUIC origin on UDP 443.
    let h3 = match &plan.tls {
        Some(tls) if plan.http == Protocol::H3 => {
            let socket =
                linkem::net::in_namespace(&gns, move || std::net::UdpSocket::bind(https_addr))?
                    .with_context(|| format!("the HTTP/3 origin cannot bind UDP {https_addr}"))?;
            let _in_rt = plan.rt.enter();
            Some(
                loadgen::h3::H3Origin::start(socket, &tls.pki, Some(Arc::new(site_files(plan))))
                    .context("cannot start the HTTP/3 origin")?,
            )
        }
        _ => None,
    };
    // The browser workload over TLS: the same site from an HTTPS origin on TCP 443; over HTTP/3
    // too where the terminal blocks or rejects QUIC (HTTP/2, advertising the QUIC origin with
    // Alt-Svc, as a real HTTP/3 site does: what the browser falls back to).
    let https = match (&plan.tls, &h3) {
        (Some(tls), None) => Some(start_origin(
            plan,
            &gns,
            https_addr,
            cc,
            Some(Arc::clone(&tls.config)),
            None,
        )?),
        (Some(tls), Some(h3)) if contender.quic_fallback().is_some() => Some(start_origin(
            plan,
            &gns,
            https_addr,
            cc,
            Some(Arc::clone(&tls.fallback)),
            Some(h3.alt_svc()),
        )?),
        _ => None,
    };
    // Under block or reject the browser is a repeat visitor that reached the origin over QUIC
    // before: a first load in a profile kept for the measured one, QUIC forced and passing
    // (before the terminal and its QUIC rule start), leaves the origin's Alt-Svc and "QUIC
    // worked here" in the profile, so the measured load goes for QUIC first.
    let kept_profile = match (contender.quic_fallback(), &h3, &plan.browser, &lan) {
        (Some(_), Some(h3), Some(b), Some(lan)) => {
            Some(learn_quic(plan, b, h3, &lan.ns, https_addr).context("the visit before")?)
        }
        _ => None,
    };
    let daemons = match contender.is_split() {
        true => Some(Daemons::start(plan, &emu, contender)?),
        false => None,
    };
    let (client_ns, route) = match (contender, &lan) {
        (Contender::Kernel(_), _) => (tns.clone(), Route::Direct),
        (_, Some(lan)) => (lan.ns.clone(), Route::Direct),
        _ => (
            tns.clone(),
            Route::Socks5(SocketAddr::from((Ipv4Addr::LOCALHOST, SOCKS_PORT))),
        ),
    };
    let client = Client::new(origin_addr.into(), route).with_dialer(dialer(client_ns.clone(), cc));
    let (down_bps, up_bps, _) = plan.profile.parameters();

    // A small object first, untimed: the path is up as it is in use (the terminal's tunnel
    // established, ARP done), so no contender's figures include a one-time set-up.
    origin.set_phase("warm-up");
    let limit = plan.limit(WARM_UP_BYTES, down_bps);
    step(plan, limit, async {
        client.connect().await?.get(0, WARM_UP_BYTES).await
    })
    .context("warm-up")?;

    // Bulk download, timed from the connection attempt to the last byte: what a user waits for
    // a file on a new connection (a SOCKS verdict, a TCP handshake or neither is included).
    origin.set_phase("bulk download");
    let limit = plan.limit(plan.size, down_bps);
    let retrans_before = retransmitted(contender, &gns)?;
    let before = emu.stats();
    let t_connect = Instant::now();
    let mut conn = step(plan, limit, client.connect()).context("bulk download connect")?;
    let connect_s = t_connect.elapsed().as_secs_f64();
    step(plan, limit, conn.get(1, plan.size)).context("bulk download")?;
    let download_s = t_connect.elapsed().as_secs_f64();
    let after = emu.stats();
    let retrans_after = retransmitted(contender, &gns)?;
    drop(conn);
    let (up_bytes, up_packets) = uplink_delta(&before, &after);
    let mb = plan.size as f64 / 1e6;

    // Bulk upload, timed from the request's first byte to the origin's answer.
    origin.set_phase("bulk upload");
    let limit = plan.limit(plan.upload_size, up_bps);
    let mut conn = step(plan, limit, client.connect()).context("bulk upload connect")?;
    let t0 = Instant::now();
    step(plan, limit, conn.post(2, plan.upload_size)).context("bulk upload")?;
    let upload_s = t0.elapsed().as_secs_f64();
    drop(conn);

    // The web page, from the first connection attempt to the last object's last byte: as
    // HTTP/1.1 browsers load it, then HTTP/1.0 style.
    let limit = plan.limit(plan.page.iter().sum(), down_bps);
    origin.set_phase("page load");
    let t0 = Instant::now();
    step(
        plan,
        limit,
        page::fetch(&client, &plan.page, Style::BROWSER),
    )
    .context("page load")?;
    let page_load_s = t0.elapsed().as_secs_f64();
    origin.set_phase("page load, a connection per object");
    let per_object = Style::PerObject {
        connections: BROWSER_CONNECTIONS,
    };
    let t0 = Instant::now();
    step(plan, limit, page::fetch(&client, &plan.page, per_object))
        .context("page load, a connection per object")?;
    let page_per_object_s = t0.elapsed().as_secs_f64();

    // The test site in a real browser, from the client's namespace, the way the contender
    // carries the client's connections.
    let up_before = emu.stats();
    let browser = match &plan.browser {
        Some(b) => {
            origin.set_phase("browser page load");
            let (url, trust_spki, flags) = match (&plan.tls, &https, &h3) {
                (Some(tls), Some(_), Some(_)) => (
                    format!("https://{}{}", https_addr.ip(), browser::site::PAGE_PATH),
                    vec![tls.pki.spki_sha256().to_string()],
                    Vec::new(),
                ),
                (_, _, Some(h3)) => (
                    format!("https://{}{}", https_addr.ip(), browser::site::PAGE_PATH),
                    Vec::new(),
                    h3.chromium_flags(&https_addr.ip().to_string()),
                ),
                (Some(tls), Some(https), _) => {
                    https.set_phase("browser page load");
                    (
                        format!("https://{}{}", https_addr.ip(), browser::site::PAGE_PATH),
                        vec![tls.pki.spki_sha256().to_string()],
                        Vec::new(),
                    )
                }
                _ => (
                    format!("http://{origin_addr}{}", browser::site::PAGE_PATH),
                    Vec::new(),
                    Vec::new(),
                ),
            };
            let socks5 = match route {
                Route::Socks5(proxy) => Some(proxy),
                _ => None,
            };
            let req = browser::LoadRequest {
                url,
                trust_spki,
                socks5,
                netns: Some(client_ns.clone()),
                timeout: limit.min(Duration::from_secs(300)),
                expect_subresources: plan.site.subresources(),
                expect_scripts: plan.site.scripts(),
            };
            let load = match &kept_profile {
                Some(p) => b.load_in_profile(&req, &flags, &p.0),
                None => b.load_with_flags(&req, &flags),
            }
            .context("browser page load")?;
            // Under block or reject the browser falls back to HTTP/2 over TCP (normal: the
            // fallback is what the cell measures), and the terminal's rule must have caught the
            // QUIC it tried first.
            let expected = match contender.quic_fallback() {
                Some(_) => Protocol::H2.next_hop(),
                None => plan.http.next_hop(),
            };
            if load.protocol != expected {
                bail!(
                    "browser page load: --http {} {contender} expects {expected}, the browser \
                     used '{}'",
                    plan.http,
                    load.protocol
                );
            }
            let quic_caught = match contender.quic_fallback() {
                Some(policy) => {
                    let n = linkem::net::in_namespace(&tns, pep::quic_policy::read_counter)?
                        .context("reading the terminal's QUIC rule counter")?;
                    if n == 0 {
                        bail!(
                            "browser page load: quic = \"{}\" caught no QUIC packet: the \
                             browser did not go for QUIC first, so this is not the repeat visit \
                             the cell measures",
                            policy.as_str()
                        );
                    }
                    Some(n)
                }
                None => None,
            };
            let load_ms = load.load.as_secs_f64() * 1e3;
            let critical_path = browser::waterfall::critical_path(&load.fetches, load_ms, |p| {
                plan.site.referrer(p).map(String::from)
            });
            Some(BrowserSample {
                load,
                critical_path,
                loadavg: loadavg(),
                quic_caught,
            })
        }
        None => None,
    };
    let (browser_uplink_bytes, _) = uplink_delta(&up_before, &emu.stats());
    let browser_load_s = browser
        .as_ref()
        .map_or(f64::NAN, |b| b.load.load.as_secs_f64());

    // The client has closed its connections; their closes may still be crossing the hop. The
    // daemons drain (they wait for every stream's end to be delivered) before they exit.
    origin.set_phase("daemons' graceful shutdown");
    if let Some(d) = daemons {
        d.stop().context("stopping the daemons")?;
    }
    let mut errors = origin.errors();
    let mut not_found = origin.not_found();
    drop(origin);
    if let Some(https) = https {
        errors.extend(
            https
                .errors()
                .into_iter()
                .map(|e| format!("HTTPS origin: {e}")),
        );
        let extra = https.not_found();
        not_found.count += extra.count;
        not_found.first.extend(extra.first);
    }
    if let Some(h3) = h3 {
        errors.extend(
            h3.errors()
                .into_iter()
                .map(|e| format!("HTTP/3 origin: {e}")),
        );
        let extra = h3.not_found();
        not_found.count += extra.count;
        not_found.first.extend(extra.first);
    }
    if let Some(e) = errors.first() {
        bail!("origin: {e}");
    }
    drop(kept_profile);
    drop(lan);
    emu.stop().context("cannot stop the emulator")?;
    Ok(Sample {
        download_bps: plan.size as f64 * 8.0 / download_s,
        upload_bps: plan.upload_size as f64 * 8.0 / upload_s,
        page_load_s,
        page_per_object_s,
        browser_load_s,
        uplink_bytes_per_mb: up_bytes as f64 / mb,
        uplink_packets_per_mb: up_packets as f64 / mb,
        retransmitted_bytes: retrans_after.saturating_sub(retrans_before) as f64,
        connect_s,
        browser_uplink_bytes: if plan.browser.is_some() {
            browser_uplink_bytes as f64
        } else {
            f64::NAN
        },
        browser,
        not_found,
    })
}

/// A browser profile directory kept across two loads; removed on drop.
struct KeptProfile(std::path::PathBuf);

impl Drop for KeptProfile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The visit before the measured one under block or reject: the browser in the LAN loads the
/// site over QUIC (forced, the terminal not started yet, so QUIC is routed as under `pass`) in a
/// profile kept for the measured load, and must have written down what a repeat visit goes on:
/// the origin's `Alt-Svc` (its HTTP/3) and that QUIC worked on this network.
fn learn_quic(
    plan: &Plan,
    b: &browser::Chromium,
    h3: &loadgen::h3::H3Origin,
    lan_ns: &str,
    addr: SocketAddrV4,
) -> Result<KeptProfile> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let profile = KeptProfile(std::env::temp_dir().join(format!(
        "satstp-bench-link-{}-profile-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )));
    let _ = std::fs::remove_dir_all(&profile.0);
    let (down_bps, _, _) = plan.profile.parameters();
    let req = browser::LoadRequest {
        url: format!("https://{}{}", addr.ip(), browser::site::PAGE_PATH),
        trust_spki: Vec::new(),
        socks5: None,
        netns: Some(lan_ns.to_string()),
        timeout: plan
            .limit(plan.site.total_bytes() as u64, down_bps)
            .min(Duration::from_secs(300)),
        expect_subresources: plan.site.subresources(),
        expect_scripts: plan.site.scripts(),
    };
    let load = b.load_in_profile(&req, &h3.chromium_flags(&addr.ip().to_string()), &profile.0)?;
    if load.protocol != Protocol::H3.next_hop() {
        bail!("the browser used '{}', not h3", load.protocol);
    }
    let state = profile.0.join("Default").join("Network Persistent State");
    let text = std::fs::read_to_string(&state).unwrap_or_default();
    if !text.contains("alternative_service") {
        bail!(
            "{} kept no Alt-Svc in its profile ({} {}): a repeat visit cannot be staged with \
             this browser (chromium-headless-shell keeps no network state; use --browser \
             chromium)",
            b.path().display(),
            state.display(),
            if text.is_empty() {
                "missing"
            } else {
                "without it"
            }
        );
    }
    Ok(profile)
}

/// The one-minute load average (NaN where /proc/loadavg cannot be read).
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Runs one step of the client on the bench's runtime, giving up after `limit` or when the bench
/// is stopped.
fn step<T>(
    plan: &Plan,
    limit: Duration,
    work: impl Future<Output = Result<T, loadgen::Error>>,
) -> Result<T> {
    let stop = Arc::clone(&plan.stop);
    plan.rt.block_on(async move {
        let stopped = async {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::select! {
            r = tokio::time::timeout(limit, work) => match r {
                Ok(r) => Ok(r?),
                Err(_) => Err(err!("timed out after {} s", limit.as_secs())),
            },
            () = stopped => Err(err!("stopped")),
        }
    })
}

/// The kit's origin on the bench's runtime, its socket in the gateway namespace; with `cc`, that
/// congestion control on every connection it accepts; with `tls`, HTTPS.
fn start_origin(
    plan: &Plan,
    gns: &str,
    addr: SocketAddrV4,
    cc: Option<&'static str>,
    tls: Option<Arc<rustls::ServerConfig>>,
    alt_svc: Option<String>,
) -> Result<Origin> {
    let listener = linkem::net::in_namespace(gns, move || std::net::TcpListener::bind(addr))?
        .with_context(|| format!("the origin cannot listen on {addr}"))?;
    listener.set_nonblocking(true)?;
    let on_accept = cc.map(|cc| -> SocketHook { Arc::new(move |s| set_congestion(s, cc)) });
    let files = site_files(plan);
    let _in_rt = plan.rt.enter();
    Ok(Origin::start(
        tokio::net::TcpListener::from_std(listener)?,
        OriginConfig {
            on_accept,
            files: Some(Arc::new(files)),
            alt_svc,
            tls,
        },
    ))
}

/// The browser workload's test site as the origins serve it.
fn site_files(plan: &Plan) -> Files {
    let mut files = Files::new();
    for o in plan.site.objects() {
        files.insert(&o.path, o.content_type, o.body.clone());
    }
    files
}

/// Connections made from namespace `ns`, with congestion control `cc` if given.
fn dialer(ns: String, cc: Option<&'static str>) -> Dialer {
    Arc::new(move |to| {
        let s = linkem::net::in_namespace(&ns, move || {
            std::net::TcpStream::connect_timeout(&to, Duration::from_secs(30))
        })
        .map_err(std::io::Error::other)??;
        if let Some(cc) = cc {
            set_congestion(&s, cc)?;
        }
        Ok(s)
    })
}

/// IP bytes and packets the emulated uplink delivered between two readings.
fn uplink_delta(before: &NetStats, after: &NetStats) -> (u64, u64) {
    (
        after
            .up
            .written_bytes
            .saturating_sub(before.up.written_bytes),
        after
            .up
            .written_packets
            .saturating_sub(before.up.written_packets),
    )
}

/// Retransmitted bytes so far at the download's sender: for STP the gateway's SD payload bytes
/// retransmitted (`/metrics`), for TCP the gateway namespace's `RetransSegs` × the MSS.
fn retransmitted(contender: Contender, gns: &str) -> Result<u64> {
    match contender {
        c if c.stp_hop() => {
            let name = "satstp_stp_retransmitted_bytes_total";
            let m = scrape_metrics(gns, GATEWAY_METRICS_PORT)?;
            let values: Vec<f64> = m
                .iter()
                .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
                .map(|(_, v)| *v)
                .collect();
            if values.is_empty() {
                bail!("the gateway's /metrics has no {name}");
            }
            Ok(values.iter().sum::<f64>() as u64)
        }
        _ => Ok(retrans_segs(gns)? * TCP_MSS),
    }
}
