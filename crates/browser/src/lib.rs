//! A real browser as a load generator: [`site`] builds a test web site whose objects reference
//! each other the way real pages' do (style sheets that import style sheets and images, scripts
//! that block the parser, scripts that load further scripts that add images), and [`chromium`]
//! loads its page in headless Chromium, directly, through a SOCKS5 proxy or inside a network
//! namespace, and reads the browser's own timing of the load event; [`waterfall`] splits a
//! load's time along its critical path.
//!
//! The site is data (path, content type, bytes); serving it is the origin server's job
//! (`loadgen`), so the bytes a browser fetches come from the same server the other workloads use.

pub mod chromium;
pub mod site;
pub mod waterfall;

pub use chromium::{BrowserError, Chromium, LoadRequest, PageLoad};
pub use site::{Site, SiteObject};
pub use waterfall::{CriticalPath, Fetch};
