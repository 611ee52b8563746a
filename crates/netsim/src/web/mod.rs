//! Short transfers and the web (issue 15), kept together as ns-3 keeps a module's parts apart:
//!
//! - models: [`http_model`] (the seeds' empirical HTTP traffic: reply and request sizes, objects
//!   per page, think times) and [`latency_model`] (the thesis' analytic TCP latency model);
//! - applications: [`background`] (the WWW background traffic of the node scenarios: a client
//!   opening a connection per request, a server answering with heavy-tailed sizes) and [`http`]
//!   (a browser-like client and its server over the TCP model or the real STP engine);
//! - experiments: [`experiments`] (a path, a transport and a workload in, the figures out) and
//!   [`repro`] (the `web-*` reproductions of `satstp reproduce`).

pub mod background;
pub mod experiments;
pub mod http;
pub mod http_model;
pub mod latency_model;
pub mod repro;

pub use background::{mean_response, response_size, WebClient, WebServer, REQUEST_BYTES};
