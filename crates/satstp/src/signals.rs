//! A flag raised by SIGINT or SIGTERM, for the long-running commands that must tear down what
//! they set up (namespaces, daemons, sysctls) instead of dying mid-way.

use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A flag raised by SIGINT or SIGTERM (the handlers stay installed for the process's life);
/// `notice`, if given, is printed on stderr when a signal arrives.
pub fn stop_flag(notice: Option<&'static str>) -> Result<Arc<AtomicBool>> {
    use tokio::signal::unix::{signal, SignalKind};
    let flag = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("cannot start the signal handler")?;
    let (mut int, mut term) = {
        let _guard = rt.enter();
        (
            signal(SignalKind::interrupt()).context("cannot catch SIGINT")?,
            signal(SignalKind::terminate()).context("cannot catch SIGTERM")?,
        )
    };
    let raised = flag.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            rt.block_on(async {
                loop {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    if let Some(n) = notice {
                        eprintln!("{n}");
                    }
                    raised.store(true, Ordering::SeqCst);
                }
            })
        })
        .context("cannot start the signal thread")?;
    Ok(flag)
}
